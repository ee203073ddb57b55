// Package iperf reads what iperf3 and ping print, for experiments that
// measure as seed 004 does: throughput with iperf3 (TCP and UDP) and round
// trips with ping, through every tool. A trial is one interval of one
// iperf3 run, or one ping.
package iperf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Result is one iperf3 run as the receiver saw it.
type Result struct {
	// TrialGbps is the received throughput of each whole interval, Gbit/s.
	TrialGbps []float64 `json:"trial_gbit_s"`
	// Bytes received over the run.
	Bytes float64 `json:"bytes"`
	// LostPercent is UDP's datagram loss at the receiver.
	LostPercent float64 `json:"lost_percent,omitempty"`
	// Retransmits is TCP's count at the sender.
	Retransmits int64 `json:"retransmits,omitempty"`
}

type sum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	LostPercent   float64 `json:"lost_percent"`
	Retransmits   int64   `json:"retransmits"`
}

type report struct {
	Intervals []struct {
		Sum sum `json:"sum"`
	} `json:"intervals"`
	End struct {
		Sum         *sum `json:"sum"`
		SumSent     *sum `json:"sum_sent"`
		SumReceived *sum `json:"sum_received"`
	} `json:"end"`
	Error  string  `json:"error"`
	Server *report `json:"server_output_json"`
}

// Parse reads `iperf3 -c … -J --get-server-output` run against a server
// started with -J and an interval of interval seconds: the trials are the
// server's (the receiver's) intervals at least 90 % of interval long, at
// most trials of them.
func Parse(b []byte, interval float64, trials int) (*Result, error) {
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("iperf3 JSON: %w", err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", r.Error)
	}
	if r.Server == nil {
		return nil, errors.New("iperf3 JSON: no server_output_json (run the client with --get-server-output and the server with -J)")
	}
	if !(interval > 0) || trials < 1 {
		return nil, fmt.Errorf("interval %v, trials %d: want both above 0", interval, trials)
	}
	res := &Result{}
	for i, iv := range r.Server.Intervals {
		s := iv.Sum
		if !finite(s.Seconds, s.BitsPerSecond) || s.BitsPerSecond < 0 {
			return nil, fmt.Errorf("server interval %d: seconds %v, bits_per_second %v", i, s.Seconds, s.BitsPerSecond)
		}
		if s.Seconds < 0.9*interval || len(res.TrialGbps) == trials {
			continue
		}
		res.TrialGbps = append(res.TrialGbps, s.BitsPerSecond/1e9)
	}
	if len(res.TrialGbps) == 0 {
		return nil, fmt.Errorf("iperf3 JSON: no server interval of %vs", interval)
	}
	recv := r.Server.End.Sum
	if recv == nil {
		recv = r.Server.End.SumReceived
	}
	if recv == nil || !finite(recv.Bytes, recv.LostPercent) || recv.Bytes < 0 {
		return nil, errors.New("iperf3 JSON: the server's end has no sum")
	}
	res.Bytes = recv.Bytes
	if recv.Bytes == 0 && r.End.SumReceived != nil {
		// A UDP server sums datagrams, not bytes, at its end; the
		// client's copy of the receiver's sum has them.
		res.Bytes = r.End.SumReceived.Bytes
	}
	res.LostPercent = recv.LostPercent
	if r.End.SumSent != nil {
		res.Retransmits = r.End.SumSent.Retransmits
	}
	return res, nil
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// Ping is a ping run: every reply's round trip in ms, and the loss.
type Ping struct {
	RTTms       []float64 `json:"rtt_ms"`
	Sent        int       `json:"sent"`
	Received    int       `json:"received"`
	LostPercent float64   `json:"lost_percent"`
}

var (
	pingReply   = regexp.MustCompile(`icmp_seq=(\d+) .*time=([0-9.]+) ms`)
	pingSummary = regexp.MustCompile(`(?m)^(\d+) packets transmitted, (\d+) received`)
)

// ParsePing reads iputils ping's output (not -q): one line per reply and
// the summary. Only the replies to the first count echo requests count
// (icmp_seq 1..count, each once): run with a deadline (-w), ping waits for
// count replies and keeps sending until it has them, so it may send more
// than count, and its own loss figure then counts requests beyond count.
// Sent is count, or what ping transmitted if it stopped before.
func ParsePing(out []byte, count int) (*Ping, error) {
	if count < 1 {
		return nil, fmt.Errorf("ping: count %d, want ≥ 1", count)
	}
	s := string(out)
	m := pingSummary.FindStringSubmatch(s)
	if m == nil {
		return nil, errors.New("ping: no summary line (n packets transmitted, m received)")
	}
	sent, err1 := strconv.Atoi(m[1])
	received, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || sent < 1 || received > sent {
		return nil, fmt.Errorf("ping: summary %q: want 0 ≤ received ≤ transmitted, transmitted ≥ 1", m[0])
	}
	p := &Ping{Sent: min(sent, count)}
	seen := map[int]bool{}
	for _, line := range strings.Split(s, "\n") {
		r := pingReply.FindStringSubmatch(line)
		if r == nil {
			continue
		}
		seq, err := strconv.Atoi(r[1])
		if err != nil || seq < 1 {
			return nil, fmt.Errorf("ping: reply %q: bad icmp_seq", strings.TrimSpace(line))
		}
		v, err := strconv.ParseFloat(r[2], 64)
		if err != nil || !finite(v) || v < 0 {
			return nil, fmt.Errorf("ping: reply %q: bad time", strings.TrimSpace(line))
		}
		// Duplicates (DUP!) are not replies of their own; the icmp_seq
		// wraps at 65536, beyond any count the experiment allows.
		if seq > p.Sent || seen[seq] {
			continue
		}
		seen[seq] = true
		p.RTTms = append(p.RTTms, v)
	}
	if len(p.RTTms) > received {
		return nil, fmt.Errorf("ping: %d reply lines but %d received", len(p.RTTms), received)
	}
	p.Received = len(p.RTTms)
	p.LostPercent = 100 * float64(p.Sent-p.Received) / float64(p.Sent)
	return p, nil
}
