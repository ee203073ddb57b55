package linkcheck

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClientConfig configures one measurement by the client that runs in the
// near namespace (`strait lab probe client`). It prints one JSON report.
type ClientConfig struct {
	Server netip.AddrPort
	Test   string // rtt, loss, bulk-up (client sends) or bulk-down (server sends)

	Count    int           // rtt: probes; loss: datagrams per direction
	Interval time.Duration // rtt: time between probes
	PPS      int           // loss: datagrams per second per direction
	Size     int           // loss: datagram payload bytes (at least 48)
	Drain    time.Duration // rtt, loss: how long to wait for stragglers
	Duration time.Duration // bulk: how long to send
	Verify   bool          // bulk: compare SHA-256 of the bytes sent and received
	CC       string        // bulk: TCP congestion control of the sender ("" = namespace default)
}

// Tests are the values ClientConfig.Test accepts.
var Tests = []string{"rtt", "loss", "bulk-up", "bulk-down"}

// RTTReport lists every probe that came back.
type RTTReport struct {
	Sent    int      `json:"sent"`
	Samples []Sample `json:"samples"`
}

// Sample is one probe's round trip and its two one-way delays, in ns.
type Sample struct {
	Seq uint64 `json:"seq"`
	RTT int64  `json:"rtt"`
	Fwd int64  `json:"fwd"` // client to server
	Rev int64  `json:"rev"` // server to client
}

// LossReport counts a flood in each direction, run at the same time.
type LossReport struct {
	AtoB Flood `json:"a_to_b"`
	BtoA Flood `json:"b_to_a"`
}

// Flood is what one direction's flood sent and received. RcvbufErrors is
// the receiving namespace's UDP RcvbufErrors counter after the flood: any
// rise means the host, not the link, dropped datagrams.
type Flood struct {
	Sent         uint64 `json:"sent"`
	Received     uint64 `json:"received"`
	Duplicates   uint64 `json:"duplicates"`
	RcvbufErrors uint64 `json:"rcvbuf_errors"`
	RcvbufBefore uint64 `json:"rcvbuf_before"`
}

// BulkReport is one TCP transfer, seen from the receiving end, with the
// sender's segment size so the rate on the wire can be derived.
type BulkReport struct {
	Direction   string `json:"direction"`
	Transfer           // as the receiver saw it
	MSS         int    `json:"mss"`         // sender's payload bytes per segment
	HeaderBytes int    `json:"header"`      // IP+TCP header bytes per segment
	CC          string `json:"cc"`          // sender's congestion control
	Retransmits uint32 `json:"retransmits"` // sender's total retransmitted segments (bulk-up only)
	SHA256Match *bool  `json:"sha256_match,omitempty"`
}

// RunClient runs cfg.Test against the server and writes its report as JSON
// to w.
func RunClient(ctx context.Context, cfg ClientConfig, w io.Writer) error {
	var report any
	var err error
	switch cfg.Test {
	case "rtt":
		report, err = clientRTT(ctx, cfg)
	case "loss":
		report, err = clientLoss(ctx, cfg)
	case "bulk-up":
		report, err = clientBulkUp(ctx, cfg)
	case "bulk-down":
		report, err = clientBulkDown(ctx, cfg)
	default:
		return fmt.Errorf("test %q: want one of %s", cfg.Test, strings.Join(Tests, ", "))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Test, err)
	}
	return json.NewEncoder(w).Encode(report)
}

func clientRTT(ctx context.Context, cfg ClientConfig) (*RTTReport, error) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(cfg.Server))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", cfg.Server, err)
	}
	defer conn.Close()
	samples := make([]Sample, cfg.Count)
	got := make([]bool, cfg.Count)
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			now := monoNow()
			if err != nil {
				if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
				continue // e.g. ECONNREFUSED before the server listens
			}
			p, err := decodeProbe(buf[:n])
			if err != nil || p.kind != kindReply || p.seq >= uint64(cfg.Count) {
				continue
			}
			mu.Lock()
			if !got[p.seq] {
				got[p.seq] = true
				samples[p.seq] = Sample{Seq: p.seq, RTT: now - p.t1, Fwd: p.t2 - p.t1, Rev: now - p.t3}
			}
			mu.Unlock()
		}
	})
	buf := make([]byte, probeHeaderLen)
	for i := range cfg.Count {
		if ctx.Err() != nil {
			break
		}
		p := probe{kind: kindEcho, seq: uint64(i), t1: monoNow()}
		_, _ = conn.Write(p.encode(buf))
		time.Sleep(cfg.Interval)
	}
	_ = conn.SetReadDeadline(time.Now().Add(cfg.Drain))
	wg.Wait()
	r := &RTTReport{Sent: cfg.Count, Samples: []Sample{}}
	for i, ok := range got {
		if ok {
			r.Samples = append(r.Samples, samples[i])
		}
	}
	return r, ctx.Err()
}

// exchange sends one request line and reads one reply line.
func exchange(ctx context.Context, server netip.AddrPort, req request) (reply, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return reply{}, fmt.Errorf("dial %s: %w", server, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	return roundTrip(c, req)
}

func roundTrip(c net.Conn, req request) (reply, error) {
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return reply{}, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return reply{}, fmt.Errorf("%s: read reply: %w", req.Op, err)
	}
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		return reply{}, fmt.Errorf("%s: bad reply: %w", req.Op, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("%s: server: %s", req.Op, r.Error)
	}
	return r, nil
}

func clientLoss(ctx context.Context, cfg ClientConfig) (*LossReport, error) {
	up, down := rand.Uint64(), rand.Uint64()
	exp, err := exchange(ctx, cfg.Server, request{Op: "expect", Session: up, Count: cfg.Count})
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("listen udp: %w", err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	var r LossReport
	r.BtoA.RcvbufBefore = udpRcvbufErrors()
	t := &tally{seen: make([]uint64, (cfg.Count+63)/64)}

	var wg sync.WaitGroup
	var recvErr error
	var floodDone sync.WaitGroup
	floodDone.Add(1)
	wg.Go(func() {
		// Receive the server's flood until it says it is done, then for
		// Drain more.
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
					recvErr = err
				}
				return
			}
			if p, err := decodeProbe(buf[:n]); err == nil && p.kind == kindFlood && p.session == down {
				t.add(p.seq)
			}
		}
	})
	var downReply reply
	var downErr error
	wg.Go(func() {
		defer floodDone.Done()
		port := conn.LocalAddr().(*net.UDPAddr).Port
		downReply, downErr = exchange(ctx, cfg.Server, request{Op: "flood", Session: down, Count: cfg.Count, PPS: cfg.PPS, Size: cfg.Size, Port: port})
	})
	dst := net.UDPAddrFromAddrPort(cfg.Server)
	sent, _, err := flood(ctx, request{Session: up, Count: cfg.Count, PPS: cfg.PPS, Size: cfg.Size}, func(b []byte) error {
		_, err := conn.WriteToUDP(b, dst)
		return err
	})
	floodDone.Wait()
	_ = conn.SetReadDeadline(time.Now().Add(cfg.Drain))
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if downErr != nil {
		return nil, downErr
	}
	if recvErr != nil {
		return nil, recvErr
	}
	r.BtoA.Sent, r.BtoA.Received, r.BtoA.Duplicates = downReply.Sent, t.received, t.duplicates
	r.BtoA.RcvbufErrors = udpRcvbufErrors()
	tl, err := exchange(ctx, cfg.Server, request{Op: "tally", Session: up})
	if err != nil {
		return nil, err
	}
	r.AtoB = Flood{Sent: sent, Received: tl.Received, Duplicates: tl.Duplicates, RcvbufErrors: tl.RcvbufErrors, RcvbufBefore: exp.RcvbufErrors}
	return &r, nil
}

func dialBulk(ctx context.Context, cfg ClientConfig) (*net.TCPConn, error) {
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", cfg.Server.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", cfg.Server, err)
	}
	return c.(*net.TCPConn), nil
}

func clientBulkUp(ctx context.Context, cfg ClientConfig) (*BulkReport, error) {
	c, err := dialBulk(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if cfg.CC != "" {
		if err := setCongestion(c, cfg.CC); err != nil {
			return nil, err
		}
	}
	setSendBuffer(c)
	b, _ := json.Marshal(request{Op: "sink", Verify: cfg.Verify})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var block uint64
	deadline := time.Now().Add(cfg.Duration)
	for time.Now().Before(deadline) {
		if cfg.Verify {
			// Fresh bytes for every block, so a duplicated or misplaced
			// block changes the digest.
			block++
			fillPattern(buf, block)
			h.Write(buf)
		}
		if _, err := c.Write(buf); err != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
	}
	r := &BulkReport{Direction: "a-to-b"}
	fillTCPInfo(c, r)
	if err := c.CloseWrite(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	var rep reply
	if err := json.Unmarshal(line, &rep); err != nil {
		return nil, fmt.Errorf("bad reply: %w", err)
	}
	r.Transfer = rep.Transfer
	if cfg.Verify {
		match := rep.SHA256 == hex.EncodeToString(h.Sum(nil))
		r.SHA256Match = &match
	}
	return r, nil
}

func clientBulkDown(ctx context.Context, cfg ClientConfig) (*BulkReport, error) {
	c, err := dialBulk(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	b, _ := json.Marshal(request{Op: "source", Seconds: cfg.Duration.Seconds(), CC: cfg.CC})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	t, err := receive(c, false)
	if err != nil {
		return nil, err
	}
	r := &BulkReport{Direction: "b-to-a", Transfer: t, CC: cfg.CC}
	// The receiver learns the sender's segment size too; the congestion
	// control and retransmissions are the sender's, unknown here.
	fillTCPInfo(c, r)
	r.CC, r.Retransmits = cfg.CC, 0
	return r, nil
}

// setSendBuffer gives a bulk sender the largest send buffer the namespace
// allows. Autotuning stops at tcp_wmem's maximum (4 MiB here), which BBR's
// start-up, in flight at 2.89 times the bandwidth-delay product, outgrows
// on a 1 Gbit/s, 10 ms path: the sender then looks application-limited,
// BBR never leaves start-up, and the measurement shows the host's limit,
// not the link's. An explicit SO_SNDBUF may go to wmem_max, which the
// kernel doubles.
func setSendBuffer(c *net.TCPConn) {
	max := 4 << 20
	if b, err := os.ReadFile("/proc/sys/net/core/wmem_max"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			max = v
		}
	}
	_ = c.SetWriteBuffer(max)
}

// fillPattern fills b with bytes derived from n, fast and incompressible.
func fillPattern(b []byte, n uint64) {
	var seed [32]byte
	seed[0], seed[1], seed[2], seed[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	c := rand.NewChaCha8(seed)
	_, _ = c.Read(b)
}

// udpRcvbufErrors reads the UDP RcvbufErrors counter of the caller's
// network namespace from /proc/net/snmp.
func udpRcvbufErrors() uint64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i := 1; i < len(f) && i < len(names); i++ {
			if names[i] == "RcvbufErrors" {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
