package nodeemu

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The two tc programs of one impaired interface, written as eBPF assembly so
// the image needs no compiler and the programs carry their constants
// (prefixes, interface indexes, the mark) as immediates.

// __sk_buff field offsets (include/uapi/linux/bpf.h).
const (
	skbMark     = 8
	skbProtocol = 16
)

const (
	tcxNext = -1 // TCX_NEXT: let the packet go on as if no program ran
	tcxDrop = 2  // TCX_DROP
	// ethHeader is the Ethernet header in front of the IP header at an
	// Ethernet interface's egress hook.
	ethHeader = 14
	// ipv4Dst is the destination address's offset in an IPv4 header.
	ipv4Dst = 16
)

// ethPIPBE is ETH_P_IP as skb->protocol holds it (big-endian) read as a
// little-endian u32: the programs compare the raw field.
var ethPIPBE = int32(binary.LittleEndian.Uint16([]byte{0x08, 0x00}))

// egressSpec is the program on the node's interface: IPv4 packets toward one
// of remote that do not carry mark go to the impairment device's egress
// (bpf_redirect); everything else continues untouched (TCX_NEXT). It runs
// after netfilter (tc egress is in the device's transmit path), so the
// packets it takes are already NATed exactly as they leave the node.
func egressSpec(remote []netip.Prefix, mark uint32, into int) (*ebpf.ProgramSpec, error) {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, skbMark, asm.Word),
		asm.JEq.Imm32(asm.R2, int32(mark), "pass"),
		asm.LoadMem(asm.R2, asm.R6, skbProtocol, asm.Word),
		asm.JNE.Imm32(asm.R2, ethPIPBE, "pass"),
		// bpf_skb_load_bytes(skb, 14+16, fp-4, 4)
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, ethHeader+ipv4Dst),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -4),
		asm.Mov.Imm(asm.R4, 4),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R2, asm.RFP, -4, asm.Word),
	}
	n := 0
	for _, p := range remote {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		a := p.Addr().As4()
		var m [4]byte
		for i := 0; i < p.Bits(); i++ {
			m[i/8] |= 0x80 >> (i % 8)
		}
		// The address was loaded as it lies in the packet (network
		// order) into a little-endian register: compare alike.
		net32 := int32(binary.LittleEndian.Uint32(a[:]))
		mask32 := int32(binary.LittleEndian.Uint32(m[:]))
		insns = append(insns,
			asm.Mov.Reg32(asm.R3, asm.R2),
			asm.And.Imm32(asm.R3, mask32),
			asm.JEq.Imm32(asm.R3, net32, "redirect"),
		)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("no IPv4 prefix among %v (the node agent impairs IPv4 only)", remote)
	}
	insns = append(insns,
		asm.Ja.Label("pass"),
		asm.Mov.Imm(asm.R1, int32(into)).WithSymbol("redirect"),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRedirect.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"),
		asm.Return(),
	)
	return &ebpf.ProgramSpec{Name: "strait_emu_out", Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"}, nil
}

// ingressSpec is the program on the impairment device's other end: what
// comes out of the impairment is marked (so egressSpec lets it pass) and
// sent out of the node's interface out, with the neighbour's address
// resolved by the kernel (bpf_redirect_neigh), bypassing netfilter, which
// already saw it. l3 says the device is a TUN: its packets have no Ethernet
// header, and bpf_redirect_neigh wants one in front (it strips it and
// builds the real one), so a zeroed one is prepended.
func ingressSpec(mark uint32, out int, l3 bool) *ebpf.ProgramSpec {
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	if l3 {
		insns = append(insns,
			// bpf_skb_change_head(skb, 14, 0)
			asm.Mov.Imm(asm.R2, ethHeader),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnSkbChangeHead.Call(),
			asm.JNE.Imm(asm.R0, 0, "drop"),
		)
	}
	insns = append(insns,
		asm.Mov.Imm32(asm.R2, int32(mark)),
		asm.StoreMem(asm.R6, skbMark, asm.R2, asm.Word),
		// bpf_redirect_neigh(out, NULL, 0, 0)
		asm.Mov.Imm(asm.R1, int32(out)),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRedirectNeigh.Call(),
		asm.Return(),
	)
	if l3 {
		// the verifier refuses unreachable instructions
		insns = append(insns, asm.Mov.Imm(asm.R0, tcxDrop).WithSymbol("drop"), asm.Return())
	}
	return &ebpf.ProgramSpec{Name: "strait_emu_in", Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"}
}
