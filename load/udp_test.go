package load

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

func udpListen(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRunUDPEcho: through a real echo server on loopback every datagram
// comes back intact, and the counts add up.
func TestRunUDPEcho(t *testing.T) {
	srv := udpListen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ServeUDPEcho(ctx, srv) }()
	res, err := RunUDP(ctx, UDPConfig{Addr: srv.LocalAddr().String(), Rate: 2000, Duration: 500 * time.Millisecond, Size: 200, Flows: 3, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1000 || res.Received+res.Late != res.Sent || res.Corrupt != 0 || res.Duplicates != 0 {
		t.Fatalf("sent %d received %d late %d corrupt %d dups %d; want 1000 sent, all back intact", res.Sent, res.Received, res.Late, res.Corrupt, res.Duplicates)
	}
	if res.Latency.P50 <= 0 || res.IQRMeanUS <= 0 || res.Latency.P100 < res.Latency.P50 {
		t.Errorf("latency %+v, IQR mean %v: want positive and ordered", res.Latency, res.IQRMeanUS)
	}
}

// TestRunUDPCountsExactly: a server that drops every 10th datagram,
// corrupts every 25th and sends every 50th twice makes the generator count
// exactly those: its loss figure is what the path lost, no more or less.
func TestRunUDPCountsExactly(t *testing.T) {
	srv := udpListen(t)
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m, err := DecodeUDP(buf[:n])
			if err != nil {
				continue
			}
			switch {
			case m.Seq%10 == 0:
				continue
			case m.Seq%25 == 1:
				buf[n-1] ^= 0xff
			case m.Seq%50 == 3:
				_, _ = srv.WriteToUDPAddrPort(buf[:n], from)
			}
			_, _ = srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	res, err := RunUDP(context.Background(), UDPConfig{Addr: srv.LocalAddr().String(), Rate: 1000, Duration: time.Second, Size: 100, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// 1000 datagrams: 100 dropped, 40 corrupted, 20 echoed twice. An echo
	// later than the timeout (a descheduled test process) counts as lost
	// and late, so the accounting holds on a loaded host too.
	if res.Sent != 1000 || res.Lost-res.Late != 140 || res.Corrupt != 40 || res.Duplicates != 20 || res.Received+res.Late != 860 {
		t.Fatalf("sent %d received %d lost %d late %d corrupt %d dups %d; want 1000, 860, 140 (late ones counted in both), 40, 20", res.Sent, res.Received, res.Lost, res.Late, res.Corrupt, res.Duplicates)
	}
}

func TestUDPConfigValidate(t *testing.T) {
	good := UDPConfig{Addr: "127.0.0.1:9", Rate: 10, Duration: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, mut := range map[string]func(*UDPConfig){
		"addr":     func(c *UDPConfig) { c.Addr = "nope" },
		"rate":     func(c *UDPConfig) { c.Rate = 0 },
		"duration": func(c *UDPConfig) { c.Duration = 0 },
		"size":     func(c *UDPConfig) { c.Size = 10 },
		"flows":    func(c *UDPConfig) { c.Flows = -1 },
		"timeout":  func(c *UDPConfig) { c.Timeout = -1 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil || !bytes.HasPrefix([]byte(err.Error()), []byte(field)) {
			t.Errorf("%s: error %v, want one naming the field", field, err)
		}
	}
}

func FuzzDecodeUDP(f *testing.F) {
	f.Add(AppendUDP(nil, UDPMsg{Flow: 1, Seq: 2, Sent: 3}, 64))
	f.Add(AppendUDP(nil, UDPMsg{Flow: 1<<32 - 1, Seq: 1<<64 - 1, Sent: -1}, UDPHeaderLen))
	f.Add([]byte{})
	f.Add([]byte("SU\x02\x00"))
	f.Add(AppendUDP(nil, UDPMsg{}, 64)[:UDPHeaderLen-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeUDP(b)
		if err != nil {
			return
		}
		// An accepted header re-encodes to the same bytes, and only a
		// datagram AppendUDP made passes the byte check.
		again := AppendUDP(nil, m, len(b))
		if !bytes.Equal(again[:UDPHeaderLen], b[:UDPHeaderLen]) {
			t.Fatalf("header % x re-encodes to % x", b[:UDPHeaderLen], again[:UDPHeaderLen])
		}
		var v udpVerifier
		if v.ok(b, len(b)) != bytes.Equal(again, b) {
			t.Fatalf("verifier disagrees with AppendUDP on % x", b)
		}
	})
}

// TestServeUDPEchoAnswersItsFormatOnly: a burst of datagrams comes back
// whole, unchanged and in order, and a datagram that is not of the format
// gets no answer.
func TestServeUDPEchoAnswersItsFormatOnly(t *testing.T) {
	srv := udpListen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ServeUDPEcho(ctx, srv) }()
	c, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadBuffer(1 << 20)
	if _, err := c.Write([]byte("not the format")); err != nil {
		t.Fatal(err)
	}
	const burst = 200
	for seq := range burst {
		if _, err := c.Write(AppendUDP(nil, UDPMsg{Seq: uint64(seq)}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang bound only
	buf := make([]byte, 1<<16)
	for seq := range burst {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("echo %d of %d: %v", seq, burst, err)
		}
		if want := AppendUDP(nil, UDPMsg{Seq: uint64(seq)}, 100); string(buf[:n]) != string(want) {
			t.Fatalf("echo %d: %d bytes %x, want %x", seq, n, buf[:n], want)
		}
	}
}
