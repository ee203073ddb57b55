package emulator

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// departures tells when a packet the writer hands to a TUN device enters
// the receiving namespace's stack. That moment is what a link's delay is
// measured to (a netem qdisc releases a packet into the device at its
// time); the writer's system call reaches it some µs after it starts
// (wireguard-go's coalescing, the system call, copying the packet into a
// socket buffer), and the writer hands each packet that much ahead of its
// release (see writeLead and docs/topology.md, "Accuracy").
//
// The stamps come from a tcx ingress program on the device, which the
// kernel runs in the writer's own write(2), in __netif_receive_skb_core,
// before the IP layer: it numbers the packets and writes each one's
// CLOCK_MONOTONIC time into a ring in an array map the writer has mapped
// into memory. Only the emulator writes into the device, and the write
// delivers synchronously (a TUN device without IFF_NAPI receives in the
// writer's context), so the packets a Write delivers are the ones numbered
// from the count before it to the count after it.
//
// The device and the writer that uses the stamps both hold the mapping:
// the device is closed while the writer may still be in a write, and the
// last to let go unmaps it.
type departures struct {
	stamper
	l    link.Link
	refs atomic.Int32
}

// departureRing is the number of stamps kept. The writer reads the first
// stamp of a Write right after it returns, and only for one packet.
const departureRing = 256

// The map's one value: the count (8 bytes), then the stamps (8 bytes each).
const departureValueSize = 8 + 8*departureRing

// tcxNext is TCX_NEXT: the packet goes on as if no program ran.
const tcxNext = -1

// attachDepartures attaches the stamping program to the ingress of the
// device ifindex, which the kernel looks up in the calling thread's network
// namespace.
func attachDepartures(ifindex int) (*departures, error) {
	st, err := newStamper("departure", "strait_depart", ebpf.SchedCLS, departureValueSize, departureProgram)
	if err != nil {
		return nil, err
	}
	d := &departures{stamper: st}
	d.l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: d.prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		d.free()
		return nil, fmt.Errorf("attach departure program: %w", err)
	}
	d.refs.Store(1) // the device's
	return d, nil
}

// departureProgram is the program: it takes the next number, stores the
// time at that number in the ring and lets the packet go on. Only the
// emulator's writer sends packets through the device, one write at a time,
// so the plain increment does not race.
func departureProgram(mapFD int) asm.Instructions {
	return asm.Instructions{
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word), // key 0
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "next"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), // R1 = count
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 1),
		asm.StoreMem(asm.R0, 0, asm.R2, asm.DWord), // count++
		asm.And.Imm(asm.R1, departureRing-1),
		asm.LSh.Imm(asm.R1, 3),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.StoreMem(asm.R0, 8, asm.R7, asm.DWord),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("next"),
		asm.Return(),
	}
}

func (d *departures) word(off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&d.mem[off])))
}

// count is the number of packets stamped so far.
func (d *departures) count() uint64 { return d.word(0) }

// at is the CLOCK_MONOTONIC time at which packet i entered the stack; it
// is meaningful while i is one of the last departureRing packets.
func (d *departures) at(i uint64) int64 {
	return int64(d.word(8 + 8*int(i%departureRing)))
}

// acquire takes a hold on the stamps for a writer, and reports false if
// the device has already let go of them.
func (d *departures) acquire() bool {
	for {
		n := d.refs.Load()
		if n <= 0 {
			return false
		}
		if d.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release lets go of a hold; the last one frees the stamps.
func (d *departures) release() {
	if d.refs.Add(-1) == 0 {
		d.free()
	}
}

func (d *departures) free() {
	if d.l != nil {
		_ = d.l.Close()
	}
	d.stamper.close()
}

// monoOffset is the engine's clock minus CLOCK_MONOTONIC. Go's monotonic
// time is CLOCK_MONOTONIC too, so the offset stays put. It reads the
// clocks back to back a few times and keeps the closest pair: a busy host
// may preempt the thread between two reads.
func monoOffset(now clock) int64 {
	var ts unix.Timespec
	var off, gap int64
	for i := range 8 {
		e0 := now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		e1 := now()
		if i == 0 || e1-e0 < gap {
			off, gap = (e0+e1)/2-ts.Nano(), e1-e0
		}
	}
	return off
}

// tunDevice is a TUN device with the departure stamps of what is written
// into it (dep is nil where the program could not be attached: no
// CAP_BPF/CAP_NET_ADMIN, a kernel without tcx).
type tunDevice struct {
	tun.Device
	dep  *departures
	once sync.Once
}

func (d *tunDevice) departures() *departures { return d.dep }

func (d *tunDevice) Close() error {
	err := d.Device.Close()
	if d.dep != nil {
		// Closing the device removed it and detached the program; a
		// writer may still read the stamps of its last write.
		d.once.Do(d.dep.release)
	}
	return err
}

// withDepartures wraps dev, created as name in the calling thread's
// network namespace, with departure stamps when they can be had.
func withDepartures(dev tun.Device, name string) *tunDevice {
	d := &tunDevice{Device: dev}
	if idx, err := ifIndex(name); err == nil {
		d.dep, _ = attachDepartures(idx)
	}
	return d
}

// ifIndex is the index of the device name in the calling thread's network
// namespace.
func ifIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("ifindex of %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

// departuresOf returns the departure stamps of dev, or nil.
func departuresOf(dev Device) *departures {
	if d, ok := dev.(interface{ departures() *departures }); ok {
		return d.departures()
	}
	return nil
}
