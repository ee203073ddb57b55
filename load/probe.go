package load

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Probe wire format, version 1: the client sends 24-byte messages, the
// server sends each back unchanged. Big-endian:
//
//	magic "SP" 16 | version 8 | reserved 0 8 | conn 32 | seq 64 | sent unix ns 64
//
// conn and sent are the client's own bookkeeping; the server checks only
// magic, version and the reserved byte, and closes a connection that sends
// anything else.
const ProbeLen = 24

const (
	probeMagic   = "SP"
	probeVersion = 1
)

// ProbeMsg is one probe.
type ProbeMsg struct {
	Conn uint32
	Seq  uint64
	Sent int64 // unix nanoseconds
}

// Append appends the wire form of m to b.
func (m ProbeMsg) Append(b []byte) []byte {
	b = append(b, probeMagic...)
	b = append(b, probeVersion, 0)
	b = binary.BigEndian.AppendUint32(b, m.Conn)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	return binary.BigEndian.AppendUint64(b, uint64(m.Sent))
}

// DecodeProbe decodes one probe message.
func DecodeProbe(b []byte) (ProbeMsg, error) {
	switch {
	case len(b) != ProbeLen:
		return ProbeMsg{}, fmt.Errorf("probe: length %d, want %d", len(b), ProbeLen)
	case string(b[:2]) != probeMagic:
		return ProbeMsg{}, fmt.Errorf("probe: magic %q, want %q", b[:2], probeMagic)
	case b[2] != probeVersion:
		return ProbeMsg{}, fmt.Errorf("probe: version %d, want %d", b[2], probeVersion)
	case b[3] != 0:
		return ProbeMsg{}, fmt.Errorf("probe: reserved byte %d, want 0", b[3])
	}
	return ProbeMsg{Conn: binary.BigEndian.Uint32(b[4:]), Seq: binary.BigEndian.Uint64(b[8:]), Sent: int64(binary.BigEndian.Uint64(b[16:]))}, nil
}

// ServeProbes answers probes on ln until it is closed or ctx is done, and
// returns after every connection's goroutine exited.
func ServeProbes(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		mu.Lock()
		conns[c] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			buf := make([]byte, ProbeLen)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := DecodeProbe(buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// Probe modes.
const (
	ProbeNew    = "new"    // one TCP connection per probe
	ProbeStream = "stream" // probes spread over long-lived connections
)

// ProbeConfig configures RunProbe.
type ProbeConfig struct {
	Addr string // host:port of a probe server (through the interconnect)
	// Modes to run at once, each at Rate: ProbeNew, ProbeStream or both.
	Modes []string
	// Rate is probes per second per mode. Default 2000.
	Rate int
	// Duration of sending. Required.
	Duration time.Duration
	// Streams is the number of long-lived connections in stream mode
	// (default 8), so that they hash to different gateways.
	Streams int
	// Timeout is how long a probe may take before it counts as lost, and
	// bounds connecting. Default 1s.
	Timeout time.Duration
	// NewPauseAt and NewPauseFor leave out the new-connection probes due
	// from NewPauseAt after the start for NewPauseFor (0: none): a pause
	// in which a client's resilient nexthop group finds its buckets idle
	// and gives a gateway that came back its share (docs/failover.md,
	// "Uplink down"). Their sequence numbers are skipped, not reused.
	NewPauseAt, NewPauseFor time.Duration
}

// paused reports whether the new-connection probe seq, due
// (seq-1)×interval after the start, falls in the pause.
func (c *ProbeConfig) paused(seq uint64, interval time.Duration) bool {
	due := time.Duration(seq-1) * interval
	return c.NewPauseFor > 0 && due >= c.NewPauseAt && due < c.NewPauseAt+c.NewPauseFor
}

// Validate names the first bad field.
func (c *ProbeConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr %q: want host:port", c.Addr)
	}
	if len(c.Modes) == 0 {
		return fmt.Errorf("modes: need %s, %s or both", ProbeNew, ProbeStream)
	}
	for i, m := range c.Modes {
		if m != ProbeNew && m != ProbeStream {
			return fmt.Errorf("mode %q: must be %s or %s", m, ProbeNew, ProbeStream)
		}
		// Twice the same mode would send every sequence number twice.
		if slices.Contains(c.Modes[:i], m) {
			return fmt.Errorf("mode %q: given twice", m)
		}
	}
	switch {
	case c.Rate < 0 || c.Rate > 100000:
		return fmt.Errorf("rate %d: must be 0 (default 2000) to 100000 per second", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration %v: must be positive", c.Duration)
	case c.Streams < 0 || c.Streams > 1024:
		return fmt.Errorf("streams %d: must be 0 (default 8) to 1024", c.Streams)
	case c.Timeout < 0:
		return fmt.Errorf("timeout %v: must be >= 0 (0: 1s)", c.Timeout)
	case c.NewPauseAt < 0 || c.NewPauseFor < 0 || c.NewPauseAt+c.NewPauseFor > c.Duration:
		return fmt.Errorf("new pause %v for %v: must lie within the duration %v", c.NewPauseAt, c.NewPauseFor, c.Duration)
	}
	return nil
}

// ProbeSample is one probe's fate.
type ProbeSample struct {
	Mode string
	Seq  uint64
	Conn string // the connection: its local address
	Sent time.Time
	Recv time.Time // zero when lost
	Err  string
}

// Lost reports whether no reply came back in time.
func (s ProbeSample) Lost() bool { return s.Recv.IsZero() }

// RunProbe sends probes at the rate for the duration in every mode, waits
// up to Timeout for the last replies, and returns every probe sorted by
// mode and sequence number.
func RunProbe(ctx context.Context, cfg ProbeConfig) ([]ProbeSample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Rate == 0 {
		cfg.Rate = 2000
	}
	if cfg.Streams == 0 {
		cfg.Streams = 8
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	var all []ProbeSample
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for _, m := range cfg.Modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s []ProbeSample
			var err error
			if m == ProbeNew {
				s = probeNew(ctx, cfg)
			} else {
				s, err = probeStream(ctx, cfg)
			}
			mu.Lock()
			all = append(all, s...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b ProbeSample) int {
		if c := strings.Compare(a.Mode, b.Mode); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return all, firstErr
}

// schedule calls send(seq) at the rate for the duration, catching up in
// bursts when the process was descheduled, so that the rate holds on a busy
// machine (open loop: a slow reply never delays the next probe).
func schedule(ctx context.Context, cfg ProbeConfig, send func(seq uint64)) {
	start := time.Now()
	total := uint64(cfg.Duration.Seconds() * float64(cfg.Rate))
	interval := time.Second / time.Duration(cfg.Rate)
	for seq := uint64(1); seq <= total; {
		due := uint64(time.Since(start)/interval) + 1
		for ; seq <= due && seq <= total; seq++ {
			send(seq)
		}
		next := start.Add(time.Duration(seq-1) * interval)
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func probeNew(ctx context.Context, cfg ProbeConfig) []ProbeSample {
	var mu sync.Mutex
	var out []ProbeSample
	var wg sync.WaitGroup
	// Every close of a probe connection is a reset, not a FIN, including
	// the one the dialer does when the handshake completes just after the
	// timeout: an orderly close leaves this side in TIME_WAIT for 60 s on
	// its ephemeral port, and at 2000 connections/s to one address the port
	// range (28 232 ports, connect taking the even half first) fills within
	// seconds; connect then searches it for a free port in the kernel,
	// which cost 1.5 ms of system time per connection and put the sender
	// 40 s behind a 6 s schedule over a plain veth pair. The probe's
	// outcome is decided before the close.
	d := net.Dialer{Timeout: cfg.Timeout, Control: lingerZero}
	interval := time.Second / time.Duration(cfg.Rate)
	schedule(ctx, cfg, func(seq uint64) {
		if cfg.paused(seq, interval) {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := ProbeSample{Mode: ProbeNew, Seq: seq, Sent: time.Now()}
			err := func() error {
				c, err := d.Dial("tcp", cfg.Addr)
				if err != nil {
					return err
				}
				defer c.Close()
				s.Conn = c.LocalAddr().String()
				_ = c.SetDeadline(s.Sent.Add(cfg.Timeout))
				msg := ProbeMsg{Seq: seq, Sent: s.Sent.UnixNano()}
				if _, err := c.Write(msg.Append(nil)); err != nil {
					return err
				}
				buf := make([]byte, ProbeLen)
				if _, err := io.ReadFull(c, buf); err != nil {
					return err
				}
				back, err := DecodeProbe(buf)
				if err != nil {
					return err
				}
				if back != msg {
					return fmt.Errorf("reply %+v to probe %+v", back, msg)
				}
				s.Recv = time.Now()
				return nil
			}()
			if err != nil {
				s.Err = err.Error()
			}
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
		}()
	})
	wg.Wait()
	return out
}

// lingerZero sets SO_LINGER to 0 on a socket before it connects, so that
// closing it sends a reset and leaves no TIME_WAIT behind.
func lingerZero(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	})
	return errors.Join(err, serr)
}

// probeConn is one long-lived connection of stream mode; it reconnects
// after an error, and probes given to it while it is down are lost.
type probeConn struct {
	id    uint32
	mu    sync.Mutex
	c     net.Conn
	name  string
	sent  map[uint64]*ProbeSample
	down  bool
	dials int
}

func probeStream(ctx context.Context, cfg ProbeConfig) ([]ProbeSample, error) {
	conns := make([]*probeConn, cfg.Streams)
	var samples []*ProbeSample
	var smu sync.Mutex
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := net.Dialer{Timeout: cfg.Timeout}
	var connect func(pc *probeConn)
	connect = func(pc *probeConn) {
		defer wg.Done()
		for runCtx.Err() == nil {
			c, err := d.DialContext(runCtx, "tcp", cfg.Addr)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			pc.mu.Lock()
			pc.c, pc.name, pc.down = c, c.LocalAddr().String(), false
			pc.dials++
			pc.mu.Unlock()
			buf := make([]byte, ProbeLen)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					break
				}
				m, err := DecodeProbe(buf)
				if err != nil {
					break
				}
				now := time.Now()
				pc.mu.Lock()
				if s, ok := pc.sent[m.Seq]; ok && m.Sent == s.Sent.UnixNano() {
					s.Recv = now
					delete(pc.sent, m.Seq)
				}
				pc.mu.Unlock()
			}
			c.Close()
			pc.mu.Lock()
			pc.down = true
			for seq, s := range pc.sent {
				s.Err = "connection ended before the reply"
				delete(pc.sent, seq)
			}
			pc.mu.Unlock()
		}
	}
	for i := range conns {
		conns[i] = &probeConn{id: uint32(i), sent: map[uint64]*ProbeSample{}, down: true}
		wg.Add(1)
		go connect(conns[i])
	}
	// Wait for every connection before the clock starts: the probes
	// measure failover, not the first connects.
	deadline := time.Now().Add(10 * cfg.Timeout)
	for {
		up := 0
		for _, pc := range conns {
			pc.mu.Lock()
			if !pc.down {
				up++
			}
			pc.mu.Unlock()
		}
		if up == len(conns) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("probe streams: %d of %d connections to %s up after %v", up, len(conns), cfg.Addr, 10*cfg.Timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	schedule(ctx, cfg, func(seq uint64) {
		pc := conns[seq%uint64(len(conns))]
		s := &ProbeSample{Mode: ProbeStream, Seq: seq, Sent: time.Now()}
		smu.Lock()
		samples = append(samples, s)
		smu.Unlock()
		pc.mu.Lock()
		s.Conn = fmt.Sprintf("%d:%s", pc.id, pc.name)
		if pc.down {
			s.Err = "connection down"
			pc.mu.Unlock()
			return
		}
		c := pc.c
		pc.sent[seq] = s
		pc.mu.Unlock()
		// One small write; a full socket buffer means the path is dead
		// anyway, so do not let it stall the schedule for long.
		_ = c.SetWriteDeadline(time.Now().Add(cfg.Timeout))
		if _, err := c.Write(ProbeMsg{Conn: pc.id, Seq: seq, Sent: s.Sent.UnixNano()}.Append(nil)); err != nil {
			c.Close()
		}
	})
	time.Sleep(cfg.Timeout)
	cancel()
	for _, pc := range conns {
		pc.mu.Lock()
		if pc.c != nil {
			pc.c.Close()
		}
		pc.mu.Unlock()
	}
	wg.Wait()
	out := make([]ProbeSample, 0, len(samples))
	for _, s := range samples {
		if !s.Recv.IsZero() && s.Recv.Sub(s.Sent) > cfg.Timeout {
			s.Recv, s.Err = time.Time{}, "reply after the timeout"
		}
		if s.Recv.IsZero() && s.Err == "" {
			s.Err = "no reply"
		}
		out = append(out, *s)
	}
	return out, nil
}

// ProbeSummary is the outcome of one mode.
type ProbeSummary struct {
	Mode string
	Sent int
	Lost int
	// Recovery is Lost ÷ rate, rounded to 0.5 ms: how long the service
	// would have been dark had every lost probe been in one outage.
	Recovery time.Duration
	// LongestGap is the longest run of consecutive lost sequence numbers,
	// as time at the rate.
	LongestGap time.Duration
	// LostByConn counts lost probes per connection (stream mode), so that
	// losses on the dead gateway's connections are told from others.
	LostByConn map[string]int
}

// SummarizeProbes summarizes samples per mode; rate is the per-mode rate.
func SummarizeProbes(samples []ProbeSample, rate int) []ProbeSummary {
	if rate <= 0 {
		rate = 2000
	}
	byMode := map[string][]ProbeSample{}
	var modes []string
	for _, s := range samples {
		if _, ok := byMode[s.Mode]; !ok {
			modes = append(modes, s.Mode)
		}
		byMode[s.Mode] = append(byMode[s.Mode], s)
	}
	var out []ProbeSummary
	per := time.Second / time.Duration(rate)
	for _, m := range modes {
		ss := byMode[m]
		lostSeq := map[uint64]bool{}
		sum := ProbeSummary{Mode: m, Sent: len(ss), LostByConn: map[string]int{}}
		for _, s := range ss {
			if s.Lost() {
				sum.Lost++
				lostSeq[s.Seq] = true
				if m == ProbeStream {
					sum.LostByConn[s.Conn]++
				}
			}
		}
		longest := 0
		for seq := range lostSeq {
			if lostSeq[seq-1] {
				continue
			}
			n := 0
			for lostSeq[seq+uint64(n)] {
				n++
			}
			longest = max(longest, n)
		}
		half := float64(time.Millisecond / 2)
		sum.Recovery = time.Duration(math.Round(float64(time.Duration(sum.Lost)*per)/half) * half)
		sum.LongestGap = time.Duration(longest) * per
		out = append(out, sum)
	}
	return out
}

// probeColumns is the header of a probe CSV.
var probeColumns = []string{"mode", "seq", "conn", "send_unix_us", "recv_unix_us", "rtt_us", "lost", "error"}

// WriteProbeCSV writes one row per probe: mode, seq, conn, send and receive
// time in unix microseconds (receive empty when lost), rtt_us, lost, error.
func WriteProbeCSV(w io.Writer, samples []ProbeSample) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(probeColumns)
	for _, s := range samples {
		recv, rtt := "", ""
		if !s.Lost() {
			recv = strconv.FormatInt(s.Recv.UnixMicro(), 10)
			rtt = strconv.FormatInt(s.Recv.Sub(s.Sent).Microseconds(), 10)
		}
		_ = cw.Write([]string{s.Mode, strconv.FormatUint(s.Seq, 10), s.Conn, strconv.FormatInt(s.Sent.UnixMicro(), 10),
			recv, rtt, strconv.FormatBool(s.Lost()), csvLineBreaks(s.Err)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadProbeCSV reads what WriteProbeCSV wrote, for analyses that run after
// the probing process. Times come back in UTC at microsecond resolution;
// rtt_us and lost follow from the times and are not read.
func ReadProbeCSV(r io.Reader) ([]ProbeSample, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("read probe csv: no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("read probe csv: %w", err)
	}
	if !slices.Equal(header, probeColumns) {
		return nil, fmt.Errorf("read probe csv: header %q, want %q", header, probeColumns)
	}
	var out []ProbeSample
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read probe csv: %w", err)
		}
		s := ProbeSample{Mode: rec[0], Conn: rec[2], Err: csvLineBreaks(rec[7])}
		if s.Mode != ProbeNew && s.Mode != ProbeStream {
			return nil, fmt.Errorf("read probe csv: line %d: mode %q: want %s or %s", line, s.Mode, ProbeNew, ProbeStream)
		}
		if s.Seq, err = strconv.ParseUint(rec[1], 10, 64); err != nil {
			return nil, fmt.Errorf("read probe csv: line %d: seq %q: not an unsigned integer", line, rec[1])
		}
		sent, err := strconv.ParseInt(rec[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read probe csv: line %d: send_unix_us %q: not an integer", line, rec[3])
		}
		s.Sent = time.UnixMicro(sent).UTC()
		if rec[4] != "" {
			recv, err := strconv.ParseInt(rec[4], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read probe csv: line %d: recv_unix_us %q: not an integer or empty (lost)", line, rec[4])
			}
			s.Recv = time.UnixMicro(recv).UTC()
		}
		out = append(out, s)
	}
}
