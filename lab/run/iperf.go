package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/iperf"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/report"
)

// Iperf3 configures seed 004's measurements: for every protocol, one
// iperf3 run through every tool that carries it, cut into Trials trials of
// Interval each (iperf3's own per-interval reports, as the receiver saw
// them); and round trips with ping. iperf3 takes whole seconds only, so a
// run lasts Trials × Interval rounded up.
//
//	iperf3:
//	  protocols: [tcp, udp]
//	  trials: 50
//	  interval: 0.5s
//	  udp-bitrate: 0          # iperf3 -b: 0 sends as fast as it can
//	  udp-length: 1400        # iperf3 -l for UDP (default: iperf3's choice)
//	  udp-buffer: 4M          # iperf3 -w for UDP (default: the kernel's)
//	  ping: {count: 50, interval: 10ms}
//
// UDPLength and UDPBuffer make a UDP cell measure the path at a given
// rate rather than iperf3's defaults: iperf3 sizes datagrams by its control
// connection's MSS, which differs between tools (1448 bytes over direct
// routing, 1398 through the tunnels' smaller MSS: more packets for the same
// bits), and the receiver's default socket buffer (rmem_default, 208 KiB:
// 2 ms at 900 Mbit/s) overflows whenever a loaded host deschedules
// iperf3's server for longer (docs/packet.md, "UDP at 900 Mbit/s"). -w
// sets the buffers of both ends' data sockets; iperf3 fails the test when
// the kernel caps them below the request (net.core.rmem_max, wmem_max).
type Iperf3 struct {
	Protocols  []string `yaml:"protocols" json:"protocols"`
	Trials     int      `yaml:"trials" json:"trials"`
	Interval   string   `yaml:"interval" json:"interval"`
	UDPBitrate string   `yaml:"udp-bitrate" json:"udp_bitrate"`
	UDPLength  int      `yaml:"udp-length" json:"udp_length,omitempty"`
	UDPBuffer  string   `yaml:"udp-buffer" json:"udp_buffer,omitempty"`
	Ping       *Ping    `yaml:"ping" json:"ping,omitempty"`

	interval time.Duration
}

// Ping is the round-trip measurement: Count pings Interval apart.
type Ping struct {
	Count    int    `yaml:"count" json:"count"`
	Interval string `yaml:"interval" json:"interval"`

	interval time.Duration
}

// iperf3 service: its name in tool.Env.Services and its port.
const (
	iperfService = "iperf3"
	iperfPort    = 5202
)

// bitrateUnits strips iperf3's -b suffixes, leaving the number to check.
var bitrateUnits = strings.NewReplacer("k", "", "K", "", "m", "", "M", "", "g", "", "G", "")

func (ip *Iperf3) validate() error {
	if len(ip.Protocols) == 0 {
		ip.Protocols = []string{string(tool.TCP), string(tool.UDP)}
	}
	for i, p := range ip.Protocols {
		if p != string(tool.TCP) && p != string(tool.UDP) {
			return fmt.Errorf("iperf3.protocols[%d] %q: must be tcp or udp (ping measures icmp)", i, p)
		}
		if slices.Index(ip.Protocols, p) != i {
			return fmt.Errorf("iperf3.protocols[%d] %q: given twice", i, p)
		}
	}
	if ip.Trials == 0 {
		ip.Trials = 50
	}
	if ip.Trials < 1 || ip.Trials > 10000 {
		return fmt.Errorf("iperf3.trials %d: must be between 1 and 10000", ip.Trials)
	}
	ip.interval = time.Second
	if ip.Interval != "" {
		d, err := emulation.ParseDuration(ip.Interval)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return fmt.Errorf("iperf3.interval %q: want a duration between 100ms and 1m (iperf3's limits)", ip.Interval)
		}
		ip.interval = d
	}
	if ip.seconds() > 3600 {
		return fmt.Errorf("iperf3: %d trials of %v last over an hour", ip.Trials, ip.interval)
	}
	if ip.UDPBitrate == "" {
		ip.UDPBitrate = "0"
	}
	if _, err := strconv.ParseFloat(bitrateUnits.Replace(ip.UDPBitrate), 64); err != nil || strings.HasPrefix(ip.UDPBitrate, "-") {
		return fmt.Errorf("iperf3.udp-bitrate %q: want iperf3's -b form, e.g. 0 (unlimited), 500M, 10G", ip.UDPBitrate)
	}
	// 65507: the most a UDP datagram over IPv4 holds. iperf3 itself
	// needs room for its sequence header.
	if ip.UDPLength != 0 && (ip.UDPLength < 64 || ip.UDPLength > 65507) {
		return fmt.Errorf("iperf3.udp-length %d: want bytes of UDP payload between 64 and 65507 (0: iperf3's default)", ip.UDPLength)
	}
	if ip.UDPBuffer != "" {
		if n, err := strconv.ParseFloat(bitrateUnits.Replace(ip.UDPBuffer), 64); err != nil || n <= 0 {
			return fmt.Errorf("iperf3.udp-buffer %q: want iperf3's -w form, e.g. 4M, 512K", ip.UDPBuffer)
		}
	}
	if p := ip.Ping; p != nil {
		if p.Count == 0 {
			p.Count = 50
		}
		if p.Count < 1 || p.Count > 100000 {
			return fmt.Errorf("iperf3.ping.count %d: must be between 1 and 100000", p.Count)
		}
		p.interval = 10 * time.Millisecond
		if p.Interval != "" {
			d, err := emulation.ParseDuration(p.Interval)
			if err != nil || d < 2*time.Millisecond || d > time.Minute {
				return fmt.Errorf("iperf3.ping.interval %q: want a duration between 2ms (ping's floor as root) and 1m", p.Interval)
			}
			p.interval = d
		}
	}
	return nil
}

// seconds is an iperf3 run's -t: whole seconds covering every trial and
// one interval more, since the receiver's first interval may be cut short
// (it starts counting before the first byte arrives).
func (ip *Iperf3) seconds() int {
	return int(math.Ceil(float64(ip.Trials+1) * ip.interval.Seconds()))
}

// protocols lists the cells' protocols: iperf3's, then icmp with ping.
func (ip *Iperf3) protocols() []string {
	ps := slices.Clone(ip.Protocols)
	if ip.Ping != nil {
		ps = append(ps, string(tool.ICMP))
	}
	return ps
}

// serverArgs is the iperf3 server the unit runs on the server node: JSON
// output so clients get the receiver's intervals, at the trial interval.
func (ip *Iperf3) serverArgs() []string {
	return []string{"iperf3", "-s", "-J", "-p", strconv.Itoa(iperfPort), "-i", strconv.FormatFloat(ip.interval.Seconds(), 'f', -1, 64)}
}

func iperfPath(dir string, c report.IperfCell, rep int) string {
	return filepath.Join(dir, "raw", fmt.Sprintf("%s-%s-iperf3-%s-r%d.json", c.Scenario, c.Tool, c.Protocol, rep))
}

// measureIperf runs one cell through t: iperf3 for tcp and udp, ping for
// icmp, on the client node against target (host:port). It returns the
// bytes received, for the usage window.
func (r *runner) measureIperf(ctx context.Context, env tool.Env, c report.IperfCell, target string, rep int) (float64, string, error) {
	ip := r.e.Iperf3
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return 0, "", err
	}
	path := iperfPath(r.dir, c, rep)
	if c.Protocol == string(tool.ICMP) {
		// Without a deadline (-w) ping stops waiting max(2 × the largest
		// RTT so far, the interval) after its last echo request and counts
		// every reply still on its way as lost: a userspace tunnel that
		// was descheduled for a few intervals "lost" half the pings. With
		// -w it waits for Count replies up to the deadline (the sending
		// time plus 5 s), sending on meanwhile; ParsePing counts only the
		// replies to the first Count requests.
		deadline := int(math.Ceil(float64(ip.Ping.Count)*ip.Ping.interval.Seconds())) + 5
		cmd, err := env.Lab.Command(ctx, env.Client.ID, "ping", "-n", "-c", strconv.Itoa(ip.Ping.Count),
			"-i", strconv.FormatFloat(ip.Ping.interval.Seconds(), 'f', -1, 64), "-W", "2", "-w", strconv.Itoa(deadline), host)
		if err != nil {
			return 0, "", err
		}
		out, err := cmd.CombinedOutput()
		p, perr := iperf.ParsePing(out, ip.Ping.Count)
		if perr != nil {
			return 0, "", fmt.Errorf("ping %s: %v: %w", host, err, perr)
		}
		if err := writeJSON(path, p); err != nil {
			return 0, "", err
		}
		return 0, fmt.Sprintf("ping mean %.3f ms over %d replies, %.1f %% lost", mean(p.RTTms), p.Received, p.LostPercent), nil
	}
	args := []string{"iperf3", "-c", host, "-p", port, "-t", strconv.Itoa(ip.seconds()),
		"-i", strconv.FormatFloat(ip.interval.Seconds(), 'f', -1, 64), "-J", "--get-server-output", "--connect-timeout", "5000"}
	if c.Protocol == string(tool.UDP) {
		args = append(args, "-u", "-b", ip.UDPBitrate)
		if ip.UDPLength != 0 {
			args = append(args, "-l", strconv.Itoa(ip.UDPLength))
		}
		if ip.UDPBuffer != "" {
			args = append(args, "-w", ip.UDPBuffer)
		}
	}
	var last error
	// The server may still be starting, or busy finishing the last test
	// for a moment: retry a refused or busy start briefly.
	for attempt := 0; attempt < 20; attempt++ {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
		if err != nil {
			return 0, "", err
		}
		out, runErr := cmd.Output()
		res, err := iperf.Parse(out, ip.interval.Seconds(), ip.Trials)
		if err == nil {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				return 0, "", err
			}
			return res.Bytes, fmt.Sprintf("%s mean %.3f Gbit/s over %d trials", c.Protocol, mean(res.TrialGbps), len(res.TrialGbps)), nil
		}
		last = fmt.Errorf("iperf3 %s: %v: %w", strings.Join(args[1:], " "), runErr, err)
		if !strings.Contains(err.Error(), "unable to connect") && !strings.Contains(err.Error(), "busy") {
			break
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return 0, "", last
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// aggregateIperf reads every finished iperf3 and ping file. A tool that
// does not carry a protocol gets a row saying so.
func (r *runner) aggregateIperf() ([]report.IperfSummary, error) {
	ip := r.e.Iperf3
	if ip == nil {
		return nil, nil
	}
	var out []report.IperfSummary
	for _, sc := range r.e.scenarios {
		for _, name := range r.e.Tools {
			t, err := tool.New(name)
			if err != nil {
				return nil, err
			}
			for _, proto := range ip.protocols() {
				c := report.IperfSummary{IperfCell: report.IperfCell{Scenario: sc.Name, Tool: name, Protocol: proto}}
				if !t.Carries(tool.Protocol(proto)) {
					out = append(out, c)
					continue
				}
				c.Carried = true
				var paths []string
				var lost []float64
				for rep := 1; rep <= r.e.Repetitions; rep++ {
					path := iperfPath(r.dir, c.IperfCell, rep)
					b, err := os.ReadFile(path)
					if errors.Is(err, os.ErrNotExist) {
						continue
					}
					if err != nil {
						return nil, err
					}
					paths = append(paths, path)
					if proto == string(tool.ICMP) {
						p, err := readResult[iperf.Ping](path)
						if err != nil {
							return nil, err
						}
						c.Trials = append(c.Trials, p.RTTms...)
						lost = append(lost, p.LostPercent)
						continue
					}
					res, err := iperf.Parse(b, ip.interval.Seconds(), ip.Trials)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", path, err)
					}
					c.Trials = append(c.Trials, res.TrialGbps...)
					c.Retransmits += res.Retransmits
					lost = append(lost, res.LostPercent)
				}
				if len(paths) == 0 {
					continue
				}
				c.LostPercent = mean(lost)
				c.Finish()
				if c.Usage, err = readUsage(paths); err != nil {
					return nil, err
				}
				out = append(out, c)
			}
		}
	}
	return out, nil
}
