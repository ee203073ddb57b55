package streambench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/internal/usage"
	"github.com/strait-net/strait/load"
)

// A UDP flood at one import (README, "Concurrency limits"): UDPFlood
// client sockets, each a flow, send 1200-byte datagrams to a UDP import
// whose target only counts them, as fast as they can or at UDPFloodRate
// together, while the active TCP connections echo and a UDP echo client
// sends 1000 datagrams/s through another UDP import. Both victims are
// measured first without the flood (the active phase) and then during
// it, so the comparison is within one run on the same host.

// UDPLatency is the UDP echo client's round trips in one phase.
type UDPLatency struct {
	Phase          string
	Sent, Received uint64
	P50, P99, Max  time.Duration
}

// UDPFloodResult is what the flood sent and where it went.
type UDPFloodResult struct {
	Sent, SendErrors uint64  // datagrams the flooders handed to the kernel, and refused
	Rate             float64 // Sent per second
	Delivered        uint64  // datagrams the flood's target read
	// Drops is what the gateways' strait_udp_drops_total rose by, per
	// reason, both gateways; HostRcvbufErrors what the host's UDP
	// receive-buffer drops rose by (/proc/net/snmp, every process on the
	// host: a gateway's or the target's socket that overflowed).
	Drops            map[string]float64
	HostRcvbufErrors uint64
	// CPU is the gateways' CPU during the flood, in cores (CPU seconds
	// per second), importing then exporting; Result.ActiveCPU is the same
	// over the active phase, without the flood.
	CPU [2]float64
}

const (
	udpFloodSize = 1200 // a QUIC-sized datagram
	udpEchoRate  = 1000 // the UDP victim's datagrams per second
)

// udpSetup starts the UDP targets in this process: an echo (load's
// format) and a sink that counts what it reads. The bench's context
// stops both.
func (b *bench) udpSetup(ctx context.Context) (echo, sink string, err error) {
	e, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", "", err
	}
	s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		e.Close()
		return "", "", err
	}
	// A large receive buffer, so that what the sink misses is the
	// gateways' doing, not its own (the kernel caps it at rmem_max).
	_ = s.SetReadBuffer(8 << 20)
	go func() { _ = load.ServeUDPEcho(ctx, e) }()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, _, err := s.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
			b.udpDelivered.Add(1)
		}
	}()
	context.AfterFunc(ctx, func() { s.Close() })
	return e.LocalAddr().String(), s.LocalAddr().String(), nil
}

// udpEcho runs the UDP echo client through the echo import for d.
func (b *bench) udpEcho(ctx context.Context, phase string, d time.Duration) error {
	r, err := load.RunUDP(ctx, load.UDPConfig{Addr: b.udpImports[0].String(), Rate: udpEchoRate, Duration: d, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("udp echo during %s: %w", phase, err)
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	b.mu.Lock()
	b.r.UDPLatency = append(b.r.UDPLatency, UDPLatency{Phase: phase, Sent: r.Sent, Received: r.Received,
		P50: us(r.Latency.P50), P99: us(r.Latency.P99), Max: us(r.Latency.P100)})
	b.mu.Unlock()
	return nil
}

// udpFlood floods the sink import for Hold and until every active
// connection echoed meanwhile, with the UDP echo client beside it, and
// snapshots the gateways before the flooders stop.
func (b *bench) udpFlood(ctx context.Context) error {
	drops0, err := b.udpDrops()
	if err != nil {
		return err
	}
	rcvbuf0, err := hostRcvbufErrors()
	if err != nil {
		return err
	}
	delivered0 := b.udpDelivered.Load()
	cpu0, err := b.cpu()
	if err != nil {
		return err
	}
	var sent, sendErrs atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for w := range b.cfg.UDPFlood {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(b.udpImports[1]))
		if err != nil {
			close(done)
			wg.Wait()
			return fmt.Errorf("udp flooder %d: %w", w, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			flood(c, share(b.cfg.UDPFloodRate, b.cfg.UDPFlood, w), done, &sent, &sendErrs)
		}()
	}
	echoErr := make(chan error, 1)
	go func() { echoErr <- b.udpEcho(ctx, PhaseUDPFlood, b.cfg.hold()) }()
	err = b.waitEchoes(ctx, latUDPFlood, b.cfg.hold())
	if err == nil {
		err = <-echoErr
	}
	if err == nil {
		b.r.UDPFlood.CPU, err = b.cores(cpu0, start)
	}
	if err == nil {
		err = b.snapshot(PhaseUDPFlood, b.cfg.streams())
	}
	close(done)
	wg.Wait()
	f := &b.r.UDPFlood
	f.Sent, f.SendErrors = sent.Load(), sendErrs.Load()
	f.Rate = float64(f.Sent) / time.Since(start).Seconds()
	if err != nil {
		return err
	}
	// What is in flight when the flooders stop: through the gateways
	// in well under a second on loopback.
	time.Sleep(time.Second)
	f.Delivered = b.udpDelivered.Load() - delivered0
	drops1, err := b.udpDrops()
	if err != nil {
		return err
	}
	f.Drops = map[string]float64{}
	for k, v := range drops1 {
		if d := v - drops0[k]; d > 0 {
			f.Drops[k] = d
		}
	}
	rcvbuf1, err := hostRcvbufErrors()
	if err != nil {
		return err
	}
	f.HostRcvbufErrors = rcvbuf1 - rcvbuf0
	return nil
}

// cpu reads the gateways' CPU seconds, importing then exporting.
func (b *bench) cpu() ([2]float64, error) {
	var s [2]float64
	for i, g := range b.gws {
		var err error
		if s[i], err = usage.CPUSeconds(g.cmd.Process.Pid); err != nil {
			return s, err
		}
	}
	return s, nil
}

// cores is the gateways' CPU since cpu0 was read at start, in cores.
func (b *bench) cores(cpu0 [2]float64, start time.Time) ([2]float64, error) {
	cpu1, err := b.cpu()
	d := time.Since(start).Seconds()
	return [2]float64{(cpu1[0] - cpu0[0]) / d, (cpu1[1] - cpu0[1]) / d}, err
}

// share is flooder w's part of rate over n flooders: the remainder goes to
// the first ones, so that the parts add up to the rate asked for.
func share(rate, n, w int) int {
	if w < rate%n {
		return rate/n + 1
	}
	return rate / n
}

// flood sends udpFloodSize-byte datagrams on c until done closes, as fast
// as it can (rate 0) or rate a second, in bursts every millisecond.
func flood(c *net.UDPConn, rate int, done <-chan struct{}, sent, errs *atomic.Uint64) {
	msg := make([]byte, udpFloodSize)
	start := time.Now()
	for n := 0; ; n++ {
		select {
		case <-done:
			return
		default:
		}
		if rate > 0 {
			// Ahead of the rate: wait for it (a millisecond at least).
			if ahead := time.Duration(float64(n)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(max(ahead, time.Millisecond))
			}
		}
		if _, err := c.Write(msg); err != nil {
			errs.Add(1) // a full socket buffer, or an ICMP error of an earlier datagram
		} else {
			sent.Add(1)
		}
	}
}

// udpDrops sums strait_udp_drops_total of both gateways by reason.
func (b *bench) udpDrops() (map[string]float64, error) {
	out := map[string]float64{}
	for i := range b.gws {
		fams, err := b.families(i)
		if err != nil {
			return nil, err
		}
		if f := fams["strait_udp_drops_total"]; f != nil {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out, nil
}

// hostRcvbufErrors reads the host's UDP RcvbufErrors from /proc/net/snmp
// (this network namespace): datagrams the kernel dropped because a
// socket's receive buffer was full.
func hostRcvbufErrors() (uint64, error) {
	f, err := os.Open("/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var head []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || fs[0] != "Udp:" {
			continue
		}
		if head == nil {
			head = fs
			continue
		}
		for i, h := range head {
			if h == "RcvbufErrors" && i < len(fs) {
				return strconv.ParseUint(fs[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/snmp: no Udp RcvbufErrors (%v)", sc.Err())
}

// udpImportAddrs are the echo and the flood's import addresses, after
// the TCP imports.
func (b *bench) udpImportAddrs(port uint16) []netip.AddrPort {
	base := b.cfg.Prefix.Masked().Addr()
	return []netip.AddrPort{netip.AddrPortFrom(nth(base, b.r.Imports+1), port), netip.AddrPortFrom(nth(base, b.r.Imports+2), port)}
}
