package emulator

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// arrivals tells when the kernel queued each packet on a TUN device, so
// that a packet's delay runs from the moment it entered the link rather
// than from the moment the reader got to it. A packet that finds the
// reader asleep waits in the device until the reader's thread wakes up:
// tens of µs on a virtual machine whose idle CPU halts, as long as the rest
// of the way through a veth pair (see docs/topology.md, "Accuracy").
//
// The stamps come from an eBPF filter attached to the device
// (TUNSETFILTEREBPF), which the kernel runs in tun_net_xmit, in the sender's
// context, just before it queues the packet: it numbers the packets and
// writes each one's CLOCK_MONOTONIC time and a fingerprint (bytes 4-5 of
// its IP header: IPv4's identification) into a ring in an array map that
// the reader has mapped into memory. The device's queue is FIFO and the
// reader the only one to take from it, so the i-th packet read is the i-th
// stamped, except after the kernel drops a stamped packet because the
// queue is full. The reader resynchronizes whenever it finds the queue
// empty; in between, a packet whose fingerprint differs from its slot's is
// looked for further on (the ones in between were dropped), and one not
// found is dated when the reader has it. Every stamp is clamped to what the
// reader knows for sure (see take).
type arrivals struct {
	stamper
	next uint64 // number of the next packet Read returns
	off  int64  // the engine's clock minus CLOCK_MONOTONIC
}

// arrivalRing is the number of stamps kept: more than the device's queue
// (txQueueLen) holds, so a stamp is not overwritten before its packet is
// read.
const arrivalRing = 8192

// The map's one value: the count (8 bytes), 8 bytes of padding, then per
// slot the stamp (8 bytes) and the fingerprint (2 bytes, 6 of padding).
const arrivalValueSize = 16 + 16*arrivalRing

// bpfFMmapable is the kernel's BPF_F_MMAPABLE map flag.
const bpfFMmapable = 1 << 10

// attachArrivals attaches the stamping filter to the TUN device fd. now is
// the engine's clock; linkHeader is the length of the link-layer header in
// front of the IP header in the device's frames (0 for a TUN device, 14 for
// a TAP device: see detour).
func attachArrivals(fd int, now clock, linkHeader int) (*arrivals, error) {
	st, err := newStamper("arrival", "strait_arrival", ebpf.SocketFilter, arrivalValueSize, func(mapFD int) asm.Instructions {
		return arrivalProgram(mapFD, linkHeader)
	})
	if err != nil {
		return nil, err
	}
	a := &arrivals{stamper: st}
	pfd := int32(a.prog.FD())
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETFILTEREBPF, uintptr(unsafe.Pointer(&pfd))); errno != 0 {
		a.close()
		return nil, fmt.Errorf("TUNSETFILTEREBPF: %w", errno)
	}
	a.off = monoOffset(now)
	return a, nil
}

// arrivalProgram is the filter: it takes the next number, stores the time
// at that number in the ring, and keeps the whole packet. The number is
// taken without an atomic add: should two CPUs send through the device at
// the same moment, both packets take one number, the second stamp
// overwrites the first, and every packet up to the next resynchronization
// is read with the stamp of the one behind it: later than its own, never
// earlier.
func arrivalProgram(mapFD, linkHeader int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // the packet's __sk_buff
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		// Bytes 4-5 of the IP packet to fp-16 (zeroed by the kernel if the
		// packet is shorter).
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, int32(linkHeader+4)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 2),
		asm.FnSkbLoadBytes.Call(),
		asm.LoadMem(asm.R8, asm.RFP, -16, asm.DWord),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word), // key 0
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "keep"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), // R1 = count
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 1),
		asm.StoreMem(asm.R0, 0, asm.R2, asm.DWord), // count++
		asm.And.Imm(asm.R1, arrivalRing-1),
		asm.LSh.Imm(asm.R1, 4),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.StoreMem(asm.R0, 16, asm.R7, asm.DWord),
		asm.StoreMem(asm.R0, 24, asm.R8, asm.DWord),
		asm.LoadMem(asm.R0, asm.R6, 0, asm.Word).WithSymbol("keep"), // __sk_buff.len: keep it all
		asm.Return(),
	}
}

func (a *arrivals) word(off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&a.mem[off])))
}

// count is the number of packets stamped so far.
func (a *arrivals) count() uint64 { return a.word(0) }

// resync says that the device's queue was found empty after count
// returned n: every packet numbered below n was read or dropped.
func (a *arrivals) resync(n uint64) { a.next = n }

// fingerprint is what the filter stores of a packet, from the bytes the
// reader got (the first of the packets a super-packet was split into keeps
// the IPv4 identification).
func fingerprint(pkt []byte) uint64 {
	if len(pkt) < 6 {
		return 0
	}
	var b [8]byte
	copy(b[:], pkt[4:6])
	return binary.NativeEndian.Uint64(b[:])
}

// maxSkip bounds how far take looks for a packet's slot.
const maxSkip = arrivalRing / 2

// take returns the arrival of the packet just read, with fingerprint fp,
// by the engine's clock, clamped to [lo, now]: no packet arrives after the
// reader has it, and the caller knows a time before which it cannot have
// arrived (see pump.readWaiter). A packet whose slot is not found (a slot
// overwritten, a fingerprint the first piece of a split packet does not
// keep, as IPv6's payload length) arrives at now: late, never early.
func (a *arrivals) take(lo, now int64, fp uint64) int64 {
	c := a.count()
	for j := a.next; j < c && j < a.next+maxSkip; j++ {
		off := 16 + 16*int(j%arrivalRing)
		if a.word(off+8) != fp {
			continue
		}
		a.next = j + 1
		t := int64(a.word(off)) + a.off
		return min(max(t, lo), now)
	}
	a.next++
	return now
}

func (a *arrivals) close() { a.stamper.close() }

// stamper is what the arrival filter and the departure program share: a
// map of one value that the program writes its stamps into and this
// process reads through a memory mapping, with no system call per packet.
type stamper struct {
	prog *ebpf.Program
	m    *ebpf.Map
	mem  []byte
}

// newStamper loads program (what, in errors) over a new mmapable map of
// one valueSize-byte value, named name in both.
func newStamper(what, name string, typ ebpf.ProgramType, valueSize int, program func(mapFD int) asm.Instructions) (stamper, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       name,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  uint32(valueSize),
		MaxEntries: 1,
		Flags:      bpfFMmapable,
	})
	if err != nil {
		return stamper{}, fmt.Errorf("%s map: %w", what, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         typ,
		License:      "GPL",
		Instructions: program(m.FD()),
	})
	if err != nil {
		m.Close()
		return stamper{}, fmt.Errorf("%s program: %w", what, err)
	}
	size := (valueSize + os.Getpagesize() - 1) / os.Getpagesize() * os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		prog.Close()
		m.Close()
		return stamper{}, fmt.Errorf("mmap %s map: %w", what, err)
	}
	return stamper{prog: prog, m: m, mem: mem}, nil
}

func (s stamper) close() {
	_ = unix.Munmap(s.mem)
	s.prog.Close()
	s.m.Close()
}
