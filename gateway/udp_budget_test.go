package gateway

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestUDPBudget: a window's quota is read without waiting; the next
// datagram waits for the window's end, or not at all when it has passed;
// over a second of windows the quotas add up to the rate.
func TestUDPBudget(t *testing.T) {
	for _, tt := range []struct {
		rate, quota int
		window      time.Duration
	}{
		{20000, 200, 10 * time.Millisecond},
		{100, 1, 10 * time.Millisecond},
		{150, 1, 6666666 * time.Nanosecond},
		{10_000_000, 100000, 10 * time.Millisecond},
	} {
		b := newUDPBudget(tt.rate)
		if b.quota != tt.quota || b.window != tt.window {
			t.Errorf("rate %d: quota %d per %v, want %d per %v", tt.rate, b.quota, b.window, tt.quota, tt.window)
		}
	}
	b := newUDPBudget(20000)
	t0 := time.Unix(1000, 0)
	if b.spend() {
		t.Fatal("a new budget spent before its first window")
	}
	if w := b.renew(t0); w != 0 {
		t.Fatalf("first window: wait %v, want none", w)
	}
	for i := 1; i < 200; i++ {
		if !b.spend() {
			t.Fatalf("datagram %d of the window's 200 refused", i+1)
		}
	}
	if b.spend() {
		t.Fatal("datagram 201 of a window of 200 taken")
	}
	if w := b.renew(t0.Add(4 * time.Millisecond)); w != 6*time.Millisecond {
		t.Fatalf("4ms into a 10ms window: wait %v, want 6ms", w)
	}
	// The next window starts where the last ended, not when it was asked.
	for range 199 {
		b.spend()
	}
	if w := b.renew(t0.Add(25 * time.Millisecond)); w != 0 {
		t.Fatalf("past the window's end: wait %v, want none", w)
	}
	// A second of windows back to back reads the rate.
	b, now, read := newUDPBudget(20000), t0, 0
	for now.Before(t0.Add(time.Second)) {
		if !b.spend() {
			now = now.Add(b.renew(now))
			if !now.Before(t0.Add(time.Second)) {
				break
			}
		}
		read++
	}
	if read != 20000 {
		t.Fatalf("read %d datagrams in a second at 20000/s", read)
	}
}

// TestSocketDrops: the kernel's drop counter of a socket rises by what
// its full receive buffer refused.
func TestSocketDrops(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadBuffer(4096)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	drops := func() uint32 {
		var n uint32
		var ok bool
		_ = rc.Control(func(fd uintptr) { n, ok = socketDrops(fd) })
		if !ok {
			t.Skip("the kernel does not report SO_MEMINFO's drops")
		}
		return n
	}
	before := drops()
	s, err := net.DialUDP("udp", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const sent = 1000
	for range sent {
		if _, err := s.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers in the sender's system call: what is not queued
	// now was dropped.
	queued := 0
	buf := make([]byte, 2000)
	_ = rc.Control(func(fd uintptr) {
		for {
			if _, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT); err != nil {
				return
			}
			queued++
		}
	})
	if got := drops() - before; got == 0 || int(got)+queued != sent {
		t.Fatalf("sent %d to a 4 KiB buffer, %d queued, the socket counted %d drops; want the rest", sent, queued, got)
	}
}
