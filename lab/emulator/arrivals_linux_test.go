package emulator

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// TestArrivalStamps checks that the reader dates a packet by the kernel's
// stamp, taken when the namespace queued it on the device, not by when the
// reader got to it: the test writes each packet into a TUN device of its own
// in a namespace whose kernel routes it into the link's device, and the
// arrival the reader reports must lie between the test's write and the
// reader's read. A stamp from when the reader woke up (the emulator before
// the stamps) comes after the write has returned; a stamp taken in the
// write's own system call (the kernel forwards the packet there, unless it
// defers the work to ksoftirqd on a busy host) comes before. The packets
// follow a flood that overflows the device's queue: the kernel stamps
// packets it then drops, and the reader must not date later packets by
// their stamps.
func TestArrivalStamps(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.Netns(t, testenv.UniqueName("stt-emuarr-"))
	testenv.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", "net.ipv4.ip_forward=1")
	var drains sync.WaitGroup
	mk := func(name, addr string) Device {
		d, err := createTUN(ns, name, DefaultMTU, &drains)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		testenv.Run(t, "ip", "-n", ns, "addr", "add", addr, "dev", name)
		testenv.Run(t, "ip", "-n", ns, "link", "set", name, "up")
		return d
	}
	ea, ta := mk("ea", "10.7.0.0/31"), mk("ta", "10.8.0.1/24")
	t.Cleanup(func() {
		ea.Close()
		ta.Close()
		drains.Wait()
	})
	testenv.Run(t, "ip", "-n", ns, "route", "add", "10.8.1.0/24", "via", "10.7.0.1", "dev", "ea")

	now := monotonic()
	p := testPump(t, ea, discard{}, emulation.Params{}, now)
	wait, date, done := p.readWaiter()
	defer done()

	rng := rand.New(rand.NewPCG(3, 3))
	bufs, sizes := [][]byte{make([]byte, p.bufSize)}, []int{0}
	send := func(seq uint64) {
		t.Helper()
		pkt := makePacket(seq, 64, rng)
		// Distinct IPv4 identifications, as a TCP sender's, are what
		// the reader recognizes packets by after a drop.
		binary.BigEndian.PutUint16(pkt[4:], uint16(seq))
		binary.BigEndian.PutUint16(pkt[10:], 0)
		binary.BigEndian.PutUint16(pkt[10:], ipChecksum(pkt[:20]))
		b := make([]byte, Headroom+len(pkt))
		copy(b[Headroom:], pkt)
		if _, err := ta.Write([][]byte{b}, Headroom); err != nil {
			t.Fatal(err)
		}
	}

	// First overflow the device's queue, so that the kernel stamps packets
	// it then drops, and read what it kept: the reader must find its
	// place again once the queue is empty.
	const flood = txQueueLen + 1000
	for i := range flood {
		send(uint64(1_000_000 + i))
	}
	for kept := 0; ; kept++ {
		var fds = []unix.PollFd{{Fd: int32(ea.(interface{ File() *os.File }).File().Fd()), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n == 0 {
			t.Logf("the device kept %d of %d flooded packets", kept, flood)
			break
		}
		if !wait() {
			t.Fatal("device closed")
		}
		if _, err := ea.Read(bufs, sizes, Headroom); err != nil {
			t.Fatal(err)
		}
		date(bufs[0][Headroom : Headroom+sizes[0]])
	}

	const n = 50
	inWrite := 0
	for i := range n {
		before := now()
		send(uint64(i))
		written := now()
		if !wait() {
			t.Fatal("device closed")
		}
		got, err := ea.Read(bufs, sizes, Headroom)
		read := now()
		if err != nil || got != 1 {
			t.Fatalf("read: %d packets, %v", got, err)
		}
		arrived := date(bufs[0][Headroom : Headroom+sizes[0]])
		pl := payload(bufs[0][Headroom : Headroom+sizes[0]])
		if pl == nil || binary.BigEndian.Uint64(pl) != uint64(i) {
			t.Fatalf("packet %d: read another packet (% x)", i, bufs[0][Headroom:Headroom+sizes[0]])
		}
		if arrived < before || arrived > read {
			t.Errorf("packet %d: arrived at %v, outside [%v, %v] (written %v)", i, time.Duration(arrived), time.Duration(before), time.Duration(read), time.Duration(written))
		}
		if arrived <= written {
			inWrite++
		}
		// Let the reader's CPU fall idle, as between sparse packets.
		time.Sleep(time.Millisecond)
	}
	if u := p.c.unstamped.Load(); u != 0 {
		t.Fatalf("%d of %d packets had no kernel stamp: the filter is not attached", u, n)
	}
	t.Logf("%d of %d packets stamped within the test's write", inWrite, n)
	if inWrite == 0 {
		t.Errorf("no packet was stamped before the test's write returned: the stamps are the reader's, not the kernel's")
	}
}
