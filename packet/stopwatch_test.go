package packet

import (
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/strait-net/strait/internal/testenv"
)

// stopwatch times what a gateway node's kernel spends on a packet between
// two tc hooks — from the ingress of the device a packet arrives on to the
// egress of the device it leaves by — whatever forwards it in between: the
// packet programs, or routing, conntrack and nftables. It is how the
// throughput benchmark compares the programs with nftables doing the same
// translation: nftables has no run-time statistics of its own, and the
// shared host's /proc/stat counts everyone's work.
//
// Both hooks run in the same softirq on one CPU (a redirect or a forward
// ends in dev_queue_xmit before the next packet is taken), so a per-CPU
// slot carries the start time from one to the other. The first program
// (attached at the head of the ingress chain) writes the time; the second
// adds the difference to a per-CPU sum and clears the slot. A packet that
// never reaches the egress leaves a stale start, which the next packet
// overwrites; gaps above maxGap are not counted.
type stopwatch struct {
	m     *ebpf.Map
	progs []*ebpf.Program
	links []link.Link
}

// stopwatchSlot is the per-CPU value: start, sum of gaps, packets.
type stopwatchSlot struct{ Start, Sum, N uint64 }

const maxGap = 1_000_000 // ns

func newStopwatch(t testing.TB) *stopwatch {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 24, MaxEntries: 1})
	must(t, err)
	s := &stopwatch{m: m}
	t.Cleanup(s.close)
	lookup := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	out := asm.Instructions{
		asm.Mov.Imm(asm.R0, -1).WithSymbol("out"), // TCX_NEXT
		asm.Return(),
	}
	start := append(append(asm.Instructions{}, lookup...),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R7, 0, asm.R0, asm.DWord),
	)
	start = append(start, out...)
	stop := append(append(asm.Instructions{}, lookup...),
		asm.LoadMem(asm.R8, asm.R7, 0, asm.DWord),
		asm.JEq.Imm(asm.R8, 0, "out"),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.R7, 0, asm.R1, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.JGT.Imm(asm.R0, maxGap, "out"),
		asm.LoadMem(asm.R1, asm.R7, 8, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R0),
		asm.StoreMem(asm.R7, 8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R7, 16, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R7, 16, asm.R1, asm.DWord),
	)
	stop = append(stop, out...)
	for _, insns := range []asm.Instructions{start, stop} {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
		must(t, err)
		s.progs = append(s.progs, p)
	}
	return s
}

// attach starts the watch at from's ingress and stops it at to's egress,
// devices of the network namespace ns.
func (s *stopwatch) attach(t testing.TB, ns, from, to string) {
	t.Helper()
	err := testenv.InNetns(ns, func() error {
		for i, a := range []struct {
			dev    string
			attach ebpf.AttachType
		}{{from, ebpf.AttachTCXIngress}, {to, ebpf.AttachTCXEgress}} {
			ifi, err := netInterfaceIndex(a.dev)
			if err != nil {
				return err
			}
			l, err := link.AttachTCX(link.TCXOptions{Interface: ifi, Program: s.progs[i], Attach: a.attach, Anchor: link.Head()})
			if err != nil {
				return err
			}
			s.links = append(s.links, l)
		}
		return nil
	})
	must(t, err)
}

// read returns the mean gap in ns and the packets timed since the last
// read, and starts over.
func (s *stopwatch) read(t testing.TB) (float64, uint64) {
	t.Helper()
	var slots []stopwatchSlot
	must(t, s.m.Lookup(uint32(0), &slots))
	var sum, n uint64
	for _, v := range slots {
		sum += v.Sum
		n += v.N
	}
	must(t, s.m.Update(uint32(0), make([]stopwatchSlot, len(slots)), ebpf.UpdateAny))
	if n == 0 {
		return 0, 0
	}
	return float64(sum) / float64(n), n
}

func (s *stopwatch) close() {
	for _, l := range s.links {
		l.Close()
	}
	for _, p := range s.progs {
		p.Close()
	}
	s.m.Close()
}

// netInterfaceIndex is the index of the device name in the calling
// thread's network namespace (net.InterfaceByName asks netlink through a
// socket of that namespace).
func netInterfaceIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

// TestStopwatchLoads: the verifier accepts the stopwatch's hand-written
// programs (the benchmark that uses them runs only on demand).
func TestStopwatchLoads(t *testing.T) {
	testenv.RequireRoot(t)
	newStopwatch(t)
}
