package load

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func FuzzDecodeProbe(f *testing.F) {
	f.Add(ProbeMsg{Conn: 3, Seq: 9, Sent: 12345}.Append(nil))
	f.Add([]byte("SP\x01\x00"))
	// Edges: nothing, the largest numbers (Sent negative as int64), one
	// byte short, one byte over.
	f.Add([]byte{})
	f.Add(ProbeMsg{Conn: math.MaxUint32, Seq: math.MaxUint64, Sent: -1}.Append(nil))
	f.Add(ProbeMsg{Conn: 3, Seq: 9, Sent: 12345}.Append(nil)[:ProbeLen-1])
	f.Add(append(ProbeMsg{Conn: 3, Seq: 9, Sent: 12345}.Append(nil), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeProbe(b)
		if err != nil {
			return
		}
		if again := m.Append(nil); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, which re-encodes to %x", b, again)
		}
	})
}

func TestDecodeProbeErrors(t *testing.T) {
	good := ProbeMsg{Seq: 1}.Append(nil)
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{good[:5], "probe: length 5, want 24"},
		{append([]byte("XP"), good[2:]...), `probe: magic "XP", want "SP"`},
		{append([]byte("SP\x09"), good[3:]...), "probe: version 9, want 1"},
		{append([]byte("SP\x01\x01"), good[4:]...), "probe: reserved byte 1, want 0"},
	} {
		if _, err := DecodeProbe(tc.b); err == nil || err.Error() != tc.want {
			t.Errorf("DecodeProbe(%x) = %v, want %q", tc.b, err, tc.want)
		}
	}
}

// TestProbeLoopback runs both modes against a real server on loopback:
// every probe is answered, and the sequence numbers are complete.
func TestProbeLoopback(t *testing.T) {
	addr := startProbeServer(t)
	samples, err := RunProbe(context.Background(), ProbeConfig{Addr: addr, Modes: []string{ProbeNew, ProbeStream},
		Rate: 500, Duration: 200 * time.Millisecond, Streams: 3, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 200 {
		t.Fatalf("%d samples, want 100 per mode", len(samples))
	}
	for i, s := range samples {
		if want := uint64(i%100 + 1); s.Seq != want {
			t.Fatalf("sample %d: seq %d, want %d", i, s.Seq, want)
		}
		if s.Lost() {
			t.Errorf("%s probe %d lost: %s", s.Mode, s.Seq, s.Err)
		}
	}
	conns := map[string]bool{}
	for _, s := range samples[100:] {
		conns[s.Conn] = true
	}
	if len(conns) != 3 {
		t.Errorf("stream probes used %d connections, want 3", len(conns))
	}
	var csv strings.Builder
	if err := WriteProbeCSV(&csv, samples); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csv.String(), "\n"); n != 201 {
		t.Errorf("CSV has %d lines, want 201", n)
	}
	back, err := ReadProbeCSV(strings.NewReader(csv.String()))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		if b := back[i]; b.Mode != s.Mode || b.Seq != s.Seq || b.Conn != s.Conn || !b.Sent.Equal(s.Sent.Truncate(time.Microsecond)) || b.Lost() != s.Lost() {
			t.Fatalf("row %d read back as %+v, written from %+v", i, b, s)
		}
	}
	for _, sum := range SummarizeProbes(samples, 500) {
		if sum.Sent != 100 || sum.Lost != 0 || sum.Recovery != 0 {
			t.Errorf("%+v", sum)
		}
	}
}

// TestProbeServerDies stops the server after it answered 50 probes: stream
// probes on the broken connections are lost, not hung, and counted per
// connection. The server stops on a count, not after a time, so that a
// stalled test process cannot let the whole run finish first.
func TestProbeServerDies(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln := &dyingListener{Listener: inner, left: 50, die: cancel}
	done := make(chan error, 1)
	go func() { done <- ServeProbes(ctx, ln) }()
	samples, err := RunProbe(context.Background(), ProbeConfig{Addr: ln.Addr().String(), Modes: []string{ProbeStream},
		Rate: 500, Duration: 300 * time.Millisecond, Streams: 2, Timeout: 200 * time.Millisecond})
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	sum := SummarizeProbes(samples, 500)[0]
	if sum.Lost == 0 || sum.Lost == sum.Sent || len(sum.LostByConn) == 0 {
		t.Errorf("summary %+v: want some, not all, probes lost", sum)
	}
}

// dyingListener's connections write left replies in all, then fail every
// write and call die.
type dyingListener struct {
	net.Listener
	mu   sync.Mutex
	left int
	die  func()
}

func (l *dyingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &dyingConn{Conn: c, l: l}, nil
}

type dyingConn struct {
	net.Conn
	l *dyingListener
}

func (c *dyingConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	ok := c.l.left > 0
	c.l.left--
	c.l.mu.Unlock()
	if !ok {
		c.l.die()
		return 0, errors.New("server died")
	}
	return c.Conn.Write(b)
}

func TestProbeConfigErrors(t *testing.T) {
	good := ProbeConfig{Addr: "127.0.0.1:7000", Modes: []string{ProbeNew, ProbeStream}, Duration: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*ProbeConfig)
		want   string
	}{
		{func(c *ProbeConfig) { c.Addr = "nope" }, `addr "nope": want host:port`},
		{func(c *ProbeConfig) { c.Modes = []string{"udp"} }, `mode "udp": must be new or stream`},
		{func(c *ProbeConfig) { c.Modes = []string{ProbeNew, ProbeNew} }, `mode "new": given twice`},
		{func(c *ProbeConfig) { c.Rate = -1 }, "rate -1: must be 0 (default 2000) to 100000 per second"},
		{func(c *ProbeConfig) { c.NewPauseAt, c.NewPauseFor = 800*time.Millisecond, 300*time.Millisecond },
			"new pause 800ms for 300ms: must lie within the duration 1s"},
		{func(c *ProbeConfig) { c.NewPauseFor = -time.Second }, "new pause 0s for -1s: must lie within the duration 1s"},
	} {
		c := good
		c.Modes = slices.Clone(good.Modes)
		tc.mutate(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

// TestProbePaused: the probes due in the pause are left out, the first
// one due at its end is sent, and no pause leaves out nothing.
func TestProbePaused(t *testing.T) {
	ms := time.Millisecond
	c := ProbeConfig{NewPauseAt: 100 * ms, NewPauseFor: 50 * ms}
	var kept []uint64
	for seq := uint64(1); seq <= 200; seq++ {
		if !c.paused(seq, ms) {
			kept = append(kept, seq)
		}
	}
	// Probe seq is due at (seq-1) ms: 101..150 are due at 100..149 ms.
	if len(kept) != 150 || kept[99] != 100 || kept[100] != 151 {
		t.Errorf("kept %d probes, around the pause %v, want 150 with 100 then 151", len(kept), kept[98:102])
	}
	if (&ProbeConfig{}).paused(1, ms) {
		t.Error("a config without a pause left out probe 1")
	}
}

func TestSummarizeProbes(t *testing.T) {
	var ss []ProbeSample
	now := time.Now()
	for seq := uint64(1); seq <= 100; seq++ {
		s := ProbeSample{Mode: ProbeNew, Seq: seq, Sent: now}
		// Lost: 10..14 (a run of 5) and 50.
		if !(seq >= 10 && seq < 15) && seq != 50 {
			s.Recv = now
		}
		ss = append(ss, s)
	}
	sum := SummarizeProbes(ss, 2000)[0]
	// 6 lost at 2000/s = 3 ms; longest run 5 = 2.5 ms.
	if sum.Lost != 6 || sum.Recovery != 3*time.Millisecond || sum.LongestGap != 2500*time.Microsecond {
		t.Errorf("summary %+v", sum)
	}
	// 1 lost at 2000/s = 0.5 ms exactly; at 3000/s 0.333 ms rounds to 0.5.
	if got := SummarizeProbes(ss[:11], 3000)[0].Recovery; got != 500*time.Microsecond {
		t.Errorf("one lost at 3000/s: recovery %v, want 0.5ms", got)
	}
}

// FuzzReadProbeCSV: ReadProbeCSV never panics, and what it accepts is
// written and read back unchanged.
func FuzzReadProbeCSV(f *testing.F) {
	f.Add("mode,seq,conn,send_unix_us,recv_unix_us,rtt_us,lost,error\nnew,1,127.0.0.1:5,100,250,150,false,\nstream,2,0:x,100,,,true,connection down\n")
	f.Add("mode,seq\n")
	// Edges: nothing, numbers past int64, negative ones, invalid UTF-8,
	// a row cut short.
	f.Add("")
	f.Add("mode,seq,conn,send_unix_us,recv_unix_us,rtt_us,lost,error\nnew,18446744073709551616,c,99999999999999999999,1,1,false,\n")
	f.Add("mode,seq,conn,send_unix_us,recv_unix_us,rtt_us,lost,error\nnew,-1,c,-100,-50,-7,false,\n")
	f.Add("mode,seq,conn,send_unix_us,recv_unix_us,rtt_us,lost,error\nnew,1,\xff\xfe,100,250,150,false,\xc3\n")
	f.Add("mode,seq,conn,send_unix_us,recv_unix_us,rtt_us,lost,error\nnew,1,127.0.0.1:5,100")
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := ReadProbeCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		var b strings.Builder
		if err := WriteProbeCSV(&b, samples); err != nil {
			t.Fatalf("write what was read: %v", err)
		}
		again, err := ReadProbeCSV(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("read what was written: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(again, samples) {
			t.Fatalf("read back %+v, wrote %+v", again, samples)
		}
	})
}

// TestProbeNewLeavesNoTimeWait checks that new-connection probes close
// without leaving their ephemeral ports in TIME_WAIT: at 2000/s the port
// range fills in seconds otherwise and connect grinds (see probeNew).
func TestProbeNewLeavesNoTimeWait(t *testing.T) {
	addr := startProbeServer(t)
	samples, err := RunProbe(context.Background(), ProbeConfig{Addr: addr, Modes: []string{ProbeNew},
		Rate: 500, Duration: 100 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]bool{}
	for _, s := range samples {
		if s.Lost() {
			t.Fatalf("probe %d lost: %s", s.Seq, s.Err)
		}
		_, port, _ := net.SplitHostPort(s.Conn)
		ports[port] = true
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	// Lines: sl local_address rem_address st ...; addresses are hex
	// IP:port, state 06 is TIME_WAIT.
	_, srvPort, _ := net.SplitHostPort(addr)
	waiting := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "06" {
			continue
		}
		local, remote := f[1][strings.IndexByte(f[1], ':')+1:], f[2][strings.IndexByte(f[2], ':')+1:]
		lp, err1 := strconv.ParseUint(local, 16, 16)
		rp, err2 := strconv.ParseUint(remote, 16, 16)
		if err1 == nil && err2 == nil && ports[strconv.FormatUint(lp, 10)] && strconv.FormatUint(rp, 10) == srvPort {
			waiting++
		}
	}
	if waiting > 0 {
		t.Errorf("%d of the %d probe connections' ports are in TIME_WAIT", waiting, len(ports))
	}
}

// startProbeServer serves probes on a loopback port until t ends and
// returns its address.
func startProbeServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeProbes(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String()
}
