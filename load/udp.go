package load

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/strait-net/strait/internal/hrtimer"
)

// UDP echo wire format, version 1: the client sends datagrams of
// UDPHeaderLen or more bytes, the echo server sends each back unchanged.
// Big-endian:
//
//	magic "SU" 16 | version 8 | reserved 0 8 | flow 32 | seq 64 | sent ns 64 | payload
//
// sent is nanoseconds since the client's start (monotonic); the payload is
// a pseudo-random function of seq, so the client checks every byte that
// comes back. The server checks only the magic and version, and ignores
// anything else (a UDP server cannot close a connection).
const UDPHeaderLen = 24

const (
	udpMagic   = "SU"
	udpVersion = 1
)

// UDPMsg is the header of one datagram of strait load udp.
type UDPMsg struct {
	Flow uint32
	Seq  uint64
	Sent int64 // ns since the run started
}

// AppendUDP appends m and size−UDPHeaderLen payload bytes derived from the
// sequence number to b.
func AppendUDP(b []byte, m UDPMsg, size int) []byte {
	b = append(b, udpMagic...)
	b = append(b, udpVersion, 0)
	b = binary.BigEndian.AppendUint32(b, m.Flow)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Sent))
	return appendUDPPayload(b, m.Seq, size-UDPHeaderLen)
}

// appendUDPPayload appends n bytes of a xorshift sequence seeded by seq.
func appendUDPPayload(b []byte, seq uint64, n int) []byte {
	x := seq*0x9e3779b97f4a7c15 + 1
	for i := 0; i < n; i++ {
		if i%8 == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		b = append(b, byte(x>>(8*(i%8))))
	}
	return b
}

// DecodeUDP decodes a datagram's header; the payload is not checked.
func DecodeUDP(b []byte) (UDPMsg, error) {
	switch {
	case len(b) < UDPHeaderLen:
		return UDPMsg{}, fmt.Errorf("udp: length %d, want at least %d", len(b), UDPHeaderLen)
	case string(b[:2]) != udpMagic:
		return UDPMsg{}, fmt.Errorf("udp: magic %q, want %q", b[:2], udpMagic)
	case b[2] != udpVersion:
		return UDPMsg{}, fmt.Errorf("udp: version %d, want %d", b[2], udpVersion)
	case b[3] != 0:
		return UDPMsg{}, fmt.Errorf("udp: reserved byte %d, want 0", b[3])
	}
	return UDPMsg{Flow: binary.BigEndian.Uint32(b[4:]), Seq: binary.BigEndian.Uint64(b[8:]), Sent: int64(binary.BigEndian.Uint64(b[16:]))}, nil
}

// udpVerifier checks echoed datagrams byte for byte against what
// AppendUDP made, reusing one buffer.
type udpVerifier struct{ want []byte }

func (v *udpVerifier) ok(b []byte, size int) bool {
	m, err := DecodeUDP(b)
	if err != nil || len(b) != size {
		return false
	}
	v.want = AppendUDP(v.want[:0], m, size)
	return string(v.want) == string(b)
}

// ServeUDPEcho answers every datagram of the strait load udp format on
// conn with the same bytes, until conn is closed or ctx is done.
func ServeUDPEcho(ctx context.Context, conn *net.UDPConn) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if _, err := DecodeUDP(buf[:n]); err != nil {
			continue
		}
		_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
	}
}

// UDPConfig configures RunUDP.
type UDPConfig struct {
	Addr string // host:port of a UDP echo server (strait load udp-server)
	// Rate is datagrams per second over all flows, sent open loop.
	Rate int
	// Duration of sending. Required.
	Duration time.Duration
	// Size is the datagram size in bytes, UDPHeaderLen to 65507 (default
	// 64).
	Size int
	// Flows is the number of client sockets (source ports), each a flow
	// through a gateway (default 1); datagrams go round-robin.
	Flows int
	// Timeout is how long after sending an echo may come back before the
	// datagram counts as lost (default 1s).
	Timeout time.Duration
}

// Validate names the first bad field.
func (c *UDPConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr %q: want host:port", c.Addr)
	}
	switch {
	case c.Rate <= 0 || c.Rate > 1000000:
		return fmt.Errorf("rate %d: must be 1 to 1000000 datagrams per second", c.Rate)
	case c.Duration <= 0 || c.Duration > time.Hour:
		return fmt.Errorf("duration %v: must be positive, at most 1h", c.Duration)
	case c.Size != 0 && (c.Size < UDPHeaderLen || c.Size > 65507):
		return fmt.Errorf("size %d: must be 0 (default 64) or %d to 65507", c.Size, UDPHeaderLen)
	case c.Flows < 0 || c.Flows > 1024:
		return fmt.Errorf("flows %d: must be 0 (default 1) to 1024", c.Flows)
	case c.Timeout < 0:
		return fmt.Errorf("timeout %v: must be >= 0 (0: 1s)", c.Timeout)
	}
	if n := float64(c.Rate) * c.Duration.Seconds(); n > 1e8 {
		return fmt.Errorf("rate × duration = %.0f datagrams: at most 1e8", n)
	}
	return nil
}

// UDPResult is what RunUDP measured; its JSON form is what strait load udp
// --json writes.
type UDPResult struct {
	Addr        string  `json:"addr"`
	Size        int     `json:"size_bytes"`
	Flows       int     `json:"flows"`
	TargetRate  int     `json:"target_rate"`
	DurationSec float64 `json:"duration_s"`
	// Sent counts datagrams handed to the kernel; SendErrors those it
	// refused (a full socket buffer, ICMP errors of earlier datagrams).
	Sent       uint64 `json:"sent"`
	SendErrors uint64 `json:"send_errors"`
	// Received counts distinct datagrams echoed within Timeout with every
	// byte intact; Lost = Sent − Received.
	Received uint64 `json:"received"`
	Lost     uint64 `json:"lost"`
	// Late echoes came after Timeout (counted lost); Corrupt ones differ
	// from what was sent; Duplicates repeat an echo already counted.
	Late       uint64  `json:"late"`
	Corrupt    uint64  `json:"corrupt"`
	Duplicates uint64  `json:"duplicates"`
	LossPct    float64 `json:"loss_pct"`
	// AchievedRate is Sent over the sending time: the sending rate,
	// echoed or not (Received and Lost say what came back).
	AchievedRate float64 `json:"achieved_rate"`
	// Latency is the round trip of received datagrams, from the send call
	// to the read of the echo, µs; IQRMeanUS is the mean of its middle
	// half, as seed 001 reports.
	Latency   Percentiles `json:"latency"`
	IQRMeanUS float64     `json:"iqr_mean_us"`
}

// minSendGap is the least time RunUDP's sender waits between wake-ups: at
// 50 000 datagrams/s, one every 20 µs, a wake-up sends several.
const minSendGap = 50 * time.Microsecond

// RunUDP sends datagrams at the rate for the duration over the flows,
// waits up to Timeout for the last echoes, and returns the counts and the
// round-trip distribution.
func RunUDP(ctx context.Context, cfg UDPConfig) (*UDPResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Size == 0 {
		cfg.Size = 64
	}
	if cfg.Flows == 0 {
		cfg.Flows = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	raddr, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("addr %s: %w", cfg.Addr, err)
	}
	timer, err := hrtimer.New(ctx)
	if err != nil {
		return nil, err
	}
	defer timer.Close()
	conns := make([]*net.UDPConn, cfg.Flows)
	for i := range conns {
		c, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, fmt.Errorf("dial %s: %w", cfg.Addr, err)
		}
		_ = c.SetReadBuffer(4 << 20)
		_ = c.SetWriteBuffer(4 << 20)
		conns[i] = c
	}
	total := int(float64(cfg.Rate)*cfg.Duration.Seconds() + 0.5)
	// rtt[seq] is the echo's round trip in ns, 0 until it came; a reader
	// owns the sequence numbers of its flow, so no two goroutines write
	// one element.
	rtt := make([]int64, total)
	res := &UDPResult{Addr: cfg.Addr, Size: cfg.Size, Flows: cfg.Flows, TargetRate: cfg.Rate, DurationSec: cfg.Duration.Seconds()}
	start := time.Now()
	var mu sync.Mutex // guards the counters the readers share
	var got atomic.Uint64
	var wg sync.WaitGroup
	timeout := cfg.Timeout.Nanoseconds()
	for flow, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var late, corrupt, dups uint64
			defer func() {
				mu.Lock()
				res.Late += late
				res.Corrupt += corrupt
				res.Duplicates += dups
				mu.Unlock()
			}()
			buf := make([]byte, 1<<16)
			var v udpVerifier
			for {
				n, err := c.Read(buf)
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue // ICMP errors of earlier datagrams
				}
				now := time.Since(start).Nanoseconds()
				m, err := DecodeUDP(buf[:n])
				if err != nil || m.Flow != uint32(flow) || m.Seq >= uint64(total) || !v.ok(buf[:n], cfg.Size) {
					corrupt++
					continue
				}
				d := max(now-m.Sent, 1)
				switch {
				case rtt[m.Seq] != 0:
					dups++
				case d > timeout:
					late++
				default:
					rtt[m.Seq] = d
					got.Add(1)
				}
			}
		}()
	}

	// Open loop: each wake-up sends what the schedule says is due, so a
	// late one is caught up in a burst rather than lowering the rate. The
	// sender waits for the next datagram's time on a kernel timer, not a Go
	// timer, which wakes up to 1 ms late in an idle process
	// (internal/hrtimer), and at least minSendGap after now.
	buf := make([]byte, 0, cfg.Size)
	interval := time.Second / time.Duration(cfg.Rate)
	seq := 0
	for seq < total {
		due := min(int(time.Since(start)/interval)+1, total)
		for ; seq < due; seq++ {
			flow := seq % cfg.Flows
			buf = AppendUDP(buf[:0], UDPMsg{Flow: uint32(flow), Seq: uint64(seq), Sent: time.Since(start).Nanoseconds()}, cfg.Size)
			if _, err := conns[flow].Write(buf); err != nil {
				res.SendErrors++
				continue
			}
			res.Sent++
		}
		next := start.Add(time.Duration(seq) * interval)
		if earliest := time.Now().Add(minSendGap); next.Before(earliest) {
			next = earliest
		}
		if seq < total && timer.Wait(next) != nil {
			break
		}
	}
	sendTime := time.Since(start)
	// Wait for the last echoes: until every datagram sent is back, at most
	// Timeout.
	for deadline := time.Now().Add(cfg.Timeout); got.Load() < res.Sent && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()

	h := hdrhistogram.New(1, histMax, 3)
	var lat []int64
	for _, d := range rtt[:seq] {
		if d == 0 {
			continue
		}
		res.Received++
		us := max(d/1000, 1)
		_ = h.RecordValue(us)
		lat = append(lat, d)
	}
	res.Lost = res.Sent - min(res.Received, res.Sent)
	if res.Sent > 0 {
		res.LossPct = 100 * float64(res.Lost) / float64(res.Sent)
	}
	res.AchievedRate = float64(res.Sent) / sendTime.Seconds()
	res.Latency = percentilesOf(h)
	res.IQRMeanUS = iqrMean(lat) / 1000
	return res, ctx.Err()
}

// iqrMean is the mean of the values between the first and third quartile.
func iqrMean(v []int64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	lo, hi := len(v)/4, len(v)-len(v)/4
	if hi <= lo {
		lo, hi = 0, len(v)
	}
	var sum float64
	for _, x := range v[lo:hi] {
		sum += float64(x)
	}
	return math.Round(sum/float64(hi-lo)*10) / 10
}
