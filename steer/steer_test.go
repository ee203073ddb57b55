package steer_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/steer"
)

// TestSteer: connections and datagrams to steered destinations (loopback
// addresses nothing is bound to, so only the program can deliver them)
// reach the one socket of their protocol with the dialed address as their
// local address; a removed destination and one never added are refused.
// It runs in the test process's namespace: the program only claims the
// destinations of its own map, so it is harmless to other sockets there.
func TestSteer(t *testing.T) {
	testenv.RequireRoot(t)
	s, err := steer.New(steer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := steer.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := s.SetSocket(steer.TCP, ln); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSocket(steer.UDP, uc); err != nil {
		t.Fatal(err)
	}
	// 127.83.x.y: a range this test alone uses.
	var dests []steer.Dest
	for i := range 1000 {
		dests = append(dests, steer.Dest{Addr: netip.AddrFrom4([4]byte{127, 83, byte(i >> 8), byte(i)}), Port: uint16(20000 + i), Proto: steer.TCP})
	}
	udpDest := steer.Dest{Addr: netip.MustParseAddr("127.83.200.1"), Port: 5353, Proto: steer.UDP}
	if err := s.Add(append(dests, udpDest)...); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != len(dests)+1 {
		t.Fatalf("%d destinations steered, want %d", n, len(dests)+1)
	}

	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for _, d := range []steer.Dest{dests[0], dests[517], dests[999]} {
		ap := netip.AddrPortFrom(d.Addr, d.Port)
		c, err := net.DialTimeout("tcp", ap.String(), 10*time.Second)
		if err != nil {
			t.Fatalf("dial steered %s: %v", ap, err)
		}
		sc := <-accepted
		if got := sc.LocalAddr().(*net.TCPAddr).AddrPort(); got != ap {
			t.Errorf("accepted connection's local address %s, want the dialed %s", got, ap)
		}
		sc.Close()
		c.Close()
	}

	// Same address, a port not steered; and an address not steered.
	for _, addr := range []string{"127.83.0.0:20001", "127.83.250.1:20000"} {
		if c, err := net.DialTimeout("tcp", addr, 10*time.Second); err == nil {
			c.Close()
			t.Errorf("dial %s (not steered) connected", addr)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if err := s.Remove(dests[517]); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dests[517].Addr, dests[517].Port).String(), 10*time.Second); err == nil {
		c.Close()
		t.Error("removed destination still connects")
	}

	// The program looks at a port's destinations only while one uses it:
	// two on one port, one removed, the other still steered (added twice,
	// it counts once); both removed, neither.
	twin := steer.Dest{Addr: netip.MustParseAddr("127.83.201.1"), Port: dests[0].Port, Proto: steer.TCP}
	if err := s.Add(twin, twin); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(twin); err != nil {
		t.Fatal(err)
	}
	dial := func(d steer.Dest) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(d.Addr, d.Port).String(), 10*time.Second)
		if err != nil {
			return err
		}
		c.Close()
		(<-accepted).Close()
		return nil
	}
	if err := s.Remove(dests[0]); err != nil {
		t.Fatal(err)
	}
	if err := dial(twin); err != nil {
		t.Errorf("dial %v after the other destination on its port was removed: %v", twin, err)
	}
	if err := dial(dests[0]); err == nil {
		t.Errorf("removed %v still connects", dests[0])
	}
	if err := s.Remove(twin, twin); err != nil {
		t.Fatal(err)
	}
	if err := dial(twin); err == nil {
		t.Errorf("removed %v still connects", twin)
	}
	if err := s.Add(dests[0]); err != nil {
		t.Fatal(err)
	}
	if err := dial(dests[0]); err != nil {
		t.Errorf("dial %v added again: %v", dests[0], err)
	}

	// UDP: the datagram arrives at the UDP socket.
	cc, err := net.Dial("udp", "127.83.200.1:5353")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := cc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	n, from, err := uc.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "ping" || from.String() != cc.LocalAddr().String() {
		t.Fatalf("udp: %q from %v, %v; want ping from %v", buf[:n], from, err, cc.LocalAddr())
	}

	// Bad input is named.
	if err := s.Add(steer.Dest{Addr: netip.MustParseAddr("::1"), Port: 1, Proto: steer.TCP}); err == nil || !strings.Contains(err.Error(), "IPv4") {
		t.Errorf("IPv6 destination: %v", err)
	}
	if err := s.Add(steer.Dest{Addr: netip.MustParseAddr("127.0.0.1"), Port: 1, Proto: 1}); err == nil || !strings.Contains(err.Error(), "TCP") {
		t.Errorf("ICMP destination: %v", err)
	}

	// Closed, the program steers nothing.
	s.Close()
	s.Close()
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dests[0].Addr, dests[0].Port).String(), 10*time.Second); err == nil {
		c.Close()
		t.Error("destination still steered after Close")
	}
}

// BenchmarkAdd: programming one destination, against what a listener per
// destination costs (socket, bind, listen, close), measured in the same run.
func BenchmarkAdd(b *testing.B) {
	testenv.RequireRoot(b)
	b.Run("steer", func(b *testing.B) {
		s, err := steer.New(steer.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		i := 0
		for b.Loop() {
			d := steer.Dest{Addr: netip.AddrFrom4([4]byte{127, 84, byte(i >> 8), byte(i)}), Port: 8080, Proto: steer.TCP}
			if err := s.Add(d); err != nil {
				b.Fatal(err)
			}
			if err := s.Remove(d); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("listener", func(b *testing.B) {
		i := 0
		for b.Loop() {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 84, byte(i >> 8), byte(i)}), 8080).String())
			if err != nil {
				b.Fatal(err)
			}
			ln.Close()
			i++
		}
	})
}
