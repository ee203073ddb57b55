package emulator

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/lab/emulation"
)

// KernelLoss is the random loss of one undelayed direction of a link (no
// delay, no jitter: emulation.Params.Undelayed), carried by the kernel
// instead of the userspace emulator. Such a direction holds no packet back,
// so it needs no thread of its own; through the emulator it paid one
// anyway, the reader's wake-up, 40-45 µs per packet on this kind of VM
// whose idle CPUs halt (see docs/topology.md, "Accuracy"). Here a tcx
// program on the receiving device's ingress draws each packet's fate in the
// sender's own system call, with the same arithmetic as the emulator's
// shaper (netem's random loss with correlation), and drops the losers.
//
// The program sits on the receiving end, not the sending one, so that it
// sees every packet at its own size: the sending device must have its
// segmentation offloads off (the lab turns them off), and the kernel then
// splits a super-packet before it crosses the veth pair, also one that was
// forwarded (from a TUN device that coalesced, a VXLAN device). A
// super-packet that still comes through is drawn once and counted as
// Unsplit. Loss is decided after a tbf on the sending end, so a lost packet
// has used its time on the line (netem and the emulator drop before the
// queue): at 1 % loss, 1 % of the rate.
//
// The draws come from the kernel's bpf_get_prandom_u32, not from the lab's
// seed: a kernel-carried direction's losses cannot be replayed.
//
// The program is attached without a link (BPF_PROG_ATTACH), so it stays
// when this process exits, as the lab's qdiscs do, until the device is
// removed; Close only lets go of this process's view of the counters.
type KernelLoss struct {
	stamper
}

// The map's one value: the correlation state (8 bytes), then the three
// counters of LossCounts (8 bytes each).
const lossValueSize = 32

// tcxDrop is TCX_DROP.
const tcxDrop = 2

// Offsets in struct __sk_buff.
const (
	skbProtocol = 16
	skbGSOSegs  = 164
)

// htons is x in network byte order, as the kernel keeps skb->protocol.
func htons(x uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, x))
}

// AttachLoss attaches the loss of p to the ingress of device in network
// namespace netns ("" is the caller's). p must be undelayed and lose
// something.
func AttachLoss(netns, device string, p emulation.Params) (*KernelLoss, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("attach loss to %s: %w", device, err)
	}
	switch {
	case !p.Undelayed():
		return nil, fmt.Errorf("attach loss to %s: %v has a delay; the userspace emulator carries it", device, p)
	case p.Loss <= 0:
		return nil, fmt.Errorf("attach loss to %s: %v loses nothing", device, p)
	}
	k, err := newKernelLoss(p, false)
	if err != nil {
		return nil, err
	}
	err = inNetns(netns, func() error {
		idx, err := ifIndex(device)
		if err != nil {
			return err
		}
		return link.RawAttachProgram(link.RawAttachProgramOptions{Target: idx, Program: k.prog, Attach: ebpf.AttachTCXIngress})
	})
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("attach loss to %s in netns %q (a tcx program: Linux 6.6 or later; emulator: userspace carries the link without it, docs/topology.md): %w", device, netns, err)
	}
	return k, nil
}

// newKernelLoss loads the program for p. With fromMark the program takes
// its random value from the packet's mark instead of the kernel's
// generator, so a test can feed it chosen values.
func newKernelLoss(p emulation.Params, fromMark bool) (*KernelLoss, error) {
	loss, rho := percentU32(p.Loss), percentU32(p.LossCorrelation)
	st, err := newStamper("loss", "strait_loss", ebpf.SchedCLS, lossValueSize, func(mapFD int) asm.Instructions {
		return lossProgram(mapFD, loss, rho, fromMark)
	})
	if err != nil {
		return nil, err
	}
	// netem seeds the correlation state with a random value; so does
	// the shaper.
	v := make([]byte, lossValueSize)
	binary.NativeEndian.PutUint64(v, uint64(rand.Uint32()))
	if err := st.m.Put(uint32(0), v); err != nil {
		st.close()
		return nil, fmt.Errorf("loss map: %w", err)
	}
	return &KernelLoss{stamper: st}, nil
}

// lossProgram drops a packet when loss >= crandom(), netem's test, with
// crandom the weighted mean of a fresh random value and the previous
// result by rho (shaper.crandom), kept in the map's first word. The
// updates of the state and counters are not locked: two CPUs receiving at
// the same moment may both start from the same state, which changes one
// draw's weight, never the mean.
func lossProgram(mapFD int, loss, rho uint32, fromMark bool) asm.Instructions {
	r := uint64(rho) + 1
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // the packet's __sk_buff
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R9, asm.R0),
		// Only IP packets are drawn, as only they cross the emulator's
		// TUN devices: ARP passes, so a lossy link does not also stall
		// a neighbour's resolution for a second.
		asm.LoadMem(asm.R1, asm.R6, skbProtocol, asm.Word),
		asm.JEq.Imm(asm.R1, int32(htons(unix.ETH_P_IP)), "ip"),
		asm.JNE.Imm(asm.R1, int32(htons(unix.ETH_P_IPV6)), "pass"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("ip"),
		xadd(asm.R9, 8, asm.R1), // seen++
		asm.LoadMem(asm.R1, asm.R6, skbGSOSegs, asm.Word),
		asm.JLE.Imm(asm.R1, 1, "draw"),
		asm.Mov.Imm(asm.R1, 1),
		xadd(asm.R9, 24, asm.R1), // unsplit++
	}
	if fromMark {
		ins = append(ins, asm.LoadMem(asm.R0, asm.R6, 8, asm.Word).WithSymbol("draw")) // __sk_buff.mark
	} else {
		ins = append(ins, asm.FnGetPrandomU32.Call().WithSymbol("draw"))
	}
	ins = append(ins, asm.Mov.Reg32(asm.R0, asm.R0)) // the value's 32 bits, zero-extended
	if rho != 0 {
		ins = append(ins,
			asm.LoadImm(asm.R1, int64(uint64(1)<<32-r), asm.DWord),
			asm.Mul.Reg(asm.R0, asm.R1),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.DWord),
			asm.LoadImm(asm.R1, int64(r), asm.DWord),
			asm.Mul.Reg(asm.R2, asm.R1),
			asm.Add.Reg(asm.R0, asm.R2),
			asm.RSh.Imm(asm.R0, 32),
			asm.StoreMem(asm.R9, 0, asm.R0, asm.DWord),
		)
	}
	ins = append(ins,
		asm.LoadImm(asm.R1, int64(loss), asm.DWord),
		asm.JGT.Reg(asm.R0, asm.R1, "pass"),
		asm.Mov.Imm(asm.R1, 1),
		xadd(asm.R9, 16, asm.R1), // dropped++
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"),
		asm.Return(),
	)
	return ins
}

// xadd adds src to the 64-bit word at dst+off atomically.
func xadd(dst asm.Register, off int16, src asm.Register) asm.Instruction {
	in := asm.StoreXAdd(dst, src, asm.DWord)
	in.Offset = off
	return in
}

// Counts reads the program's counters.
func (k *KernelLoss) Counts() LossCounts {
	w := func(off int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&k.mem[off]))) }
	return LossCounts{Seen: w(8), Dropped: w(16), Unsplit: w(24)}
}

// Close lets go of this process's hold on the program and its counters;
// an attached program stays until its device is removed.
func (k *KernelLoss) Close() { k.stamper.close() }

// ProbeTCX reports whether tcx programs (Linux 6.6 or later), which
// AttachLoss and a Veth link's detour need, can be attached in network
// namespace netns ("" is the caller's). It attaches a program that lets
// every packet pass to the namespace's loopback device through a link and
// closes it again, which leaves nothing behind.
func ProbeTCX(netns string) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "strait_probe",
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, tcxNext),
			asm.Return(),
		},
	})
	if err != nil {
		return fmt.Errorf("tcx probe: load: %w", err)
	}
	defer prog.Close()
	return inNetns(netns, func() error {
		idx, err := ifIndex("lo")
		if err != nil {
			return fmt.Errorf("tcx probe: %w", err)
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("tcx probe: attach: %w", err)
		}
		return l.Close()
	})
}
