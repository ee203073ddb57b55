package emulator

import (
	"encoding/binary"
	"math/rand/v2"
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
// defers the work to ksoftirqd on a busy host) comes before.
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
	p, err := newPump(ea, discard{}, newShaper(emulation.Params{}, 1, 2), DefaultMTU, now)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p.wake)
	wait, done := p.readWaiter()
	defer done()

	const n = 50
	rng := rand.New(rand.NewPCG(3, 3))
	bufs, sizes := [][]byte{make([]byte, p.bufSize)}, []int{0}
	inWrite := 0
	for i := range n {
		pkt := makePacket(uint64(i), 64, rng)
		b := make([]byte, Headroom+len(pkt))
		copy(b[Headroom:], pkt)
		before := now()
		if _, err := ta.Write([][]byte{b}, Headroom); err != nil {
			t.Fatal(err)
		}
		written := now()
		arrived, ok := wait()
		if !ok {
			t.Fatal("device closed")
		}
		got, err := ea.Read(bufs, sizes, Headroom)
		read := now()
		if err != nil || got != 1 {
			t.Fatalf("read: %d packets, %v", got, err)
		}
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
