package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// fragment builds the Ethernet/IPv4 frame of one fragment of datagram (the
// L4 header and payload, checksum included) with IPv4 ID id: the bytes
// from offset off (a multiple of 8) on, n of them, more fragments
// following when mf.
func fragment(proto Proto, src, dst netip.Addr, id uint16, datagram []byte, off, n int, mf bool) []byte {
	b := make([]byte, 14+20+n)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
	binary.BigEndian.PutUint16(ip[4:], id)
	fo := uint16(off / 8)
	if mf {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(ip[6:], fo)
	ip[8] = 64
	ip[9] = uint8(proto)
	copy(ip[12:], src.AsSlice())
	copy(ip[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	copy(ip[20:], datagram[off:off+n])
	return b
}

// datagram is a TCP segment or UDP datagram of payload bytes from src to
// dst with its checksum set.
func datagram(proto Proto, src, dst netip.AddrPort, payload int) []byte {
	f := frame(proto, src, dst, false, payload)
	for i := range payload {
		f[len(f)-payload+i] = byte(i*13 + 1)
	}
	ip := f[14:]
	off := 6 // UDP's checksum field
	if proto == TCP {
		off = 16
	}
	binary.BigEndian.PutUint16(ip[20+off:], l4Checksum(ip))
	return append([]byte(nil), ip[20:]...)
}

// l4Checksum is tcpChecksum for either protocol: the pseudo-header holds
// the protocol number.
func l4Checksum(ip []byte) uint16 { return tcpChecksum(ip) }

// runOut runs prog on pkt and returns the verdict and the packet as it
// left.
func runOut(t *testing.T, prog *ebpf.Program, pkt []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(pkt)+256)
	ret, err := prog.Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
	must(t, err)
	return ret, out[:len(pkt)]
}

// fragEntry reads the frags map's entry of a datagram as lan_ingress
// sees it (struct frag_key with peer 0): the gateway its fragments go to
// and how (FRAG_* in bpf/packet.c).
func fragEntry(t *testing.T, d *Datapath, proto Proto, src, dst netip.Addr, id uint16) (gw netip.Addr, how uint16, ok bool) {
	t.Helper()
	k := make([]byte, 16)
	copy(k[4:], src.AsSlice())
	copy(k[8:], dst.AsSlice())
	binary.BigEndian.PutUint16(k[12:], id)
	k[14] = uint8(proto)
	v := make([]byte, 24)
	if err := d.coll.Maps["frags"].Lookup(k, v); err != nil {
		return netip.Addr{}, 0, false
	}
	return netip.AddrFrom4([4]byte(v[:4])), binary.NativeEndian.Uint16(v[22:]), true
}

// TestFragments runs lan_ingress on fragmented datagrams: the first
// fragment of a UDP datagram to an import is placed like an unfragmented
// packet, and its later fragments follow it to the same gateway (the
// frags entry names the flow's gateway); a later fragment whose first was
// not seen is left to the kernel and counted; the later fragments of a
// datagram the egress policy denies are dropped with it; a target's
// fragmented reply is restored to clusterset IP → client fragment by
// fragment, its IP checksums valid and its L4 checksum valid over the
// reassembled datagram. The VXLAN side (export, delivery) needs tunnel
// metadata, which a test run has none of: TestNamespaces carries
// fragmented datagrams both ways through real namespaces.
func TestFragments(t *testing.T) {
	f := newImportFixture(t, 3)
	prog := f.d.Program("lan_ingress")
	vip := f.vip
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	before, err := f.d.Counters()
	must(t, err)

	// 3000 bytes of UDP in three fragments: 1480, 1480 and 48 bytes (of
	// TCP, the reply's below: 60).
	dg := datagram(UDP, client, vip, 3000)
	const id = 0x1234
	parts := []struct {
		off, n int
		mf     bool
	}{{0, 1480, true}, {1480, 1480, true}, {2960, -1, false}} // -1: the rest
	size := func(dg []byte, off, n int) int {
		if n < 0 {
			return len(dg) - off
		}
		return n
	}
	for i, p := range parts {
		pkt := fragment(UDP, client.Addr(), vip.Addr(), id, dg, p.off, size(dg, p.off, p.n), p.mf)
		ret, out := runOut(t, prog, pkt)
		if ret != tcActRedirect {
			t.Fatalf("fragment %d: verdict %d, want redirect into the tunnel", i, ret)
		}
		if !bytes.Equal(out, pkt) {
			t.Errorf("fragment %d changed on its way into the tunnel", i)
		}
	}
	gw, ok := f.d.Flow(Flow{Src: client, Dst: vip, Proto: UDP})
	if !ok {
		t.Fatal("the first fragment pinned no flow")
	}
	if fgw, how, ok := fragEntry(t, f.d, UDP, client.Addr(), vip.Addr(), id); !ok || fgw != gw || how != 1 {
		t.Errorf("frags entry: gateway %v how %d (found %v), want the flow's gateway %v and FRAG_TUNNEL", fgw, how, ok, gw)
	}

	// A later fragment whose first fragment never came: not ours to
	// judge, counted.
	if ret, _ := runOut(t, prog, fragment(UDP, client.Addr(), vip.Addr(), id+1, dg, 1480, 1480, true)); ret != tcActOK {
		t.Errorf("untracked fragment: verdict %d, want passed to the kernel", ret)
	}

	// A client the egress policy denies: its first fragment and the rest
	// are dropped.
	must(t, f.d.SetPolicy(map[PolicyKey]Verdict{{Cluster: 0, Service: 1, Prefix: netip.MustParsePrefix("10.1.0.0/16")}: {Allow: true, Rule: 1}}))
	denied := netip.MustParseAddrPort("10.9.0.5:40000")
	ddg := datagram(UDP, denied, vip, 3000)
	for i, p := range parts[:2] {
		if ret, _ := runOut(t, prog, fragment(UDP, denied.Addr(), vip.Addr(), id, ddg, p.off, p.n, p.mf)); ret != tcActShot {
			t.Errorf("denied datagram's fragment %d: verdict %d, want dropped", i, ret)
		}
	}

	// A target's reply of 3000 bytes, TCP, to the SNAT address.
	snat, target := addNATEntry(t, f, client)
	reply := datagram(TCP, target, netip.AddrPortFrom(snat, 40000), 3000)
	var whole []byte
	for i, p := range parts {
		ret, out := runOut(t, prog, fragment(TCP, target.Addr(), snat, 0x4321, reply, p.off, size(reply, p.off, p.n), p.mf))
		if ret != tcActRedirect {
			t.Fatalf("reply fragment %d: verdict %d, want redirect into the tunnel", i, ret)
		}
		ip := out[14:]
		src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		if src != vip.Addr() || dst != client.Addr() {
			t.Errorf("reply fragment %d: %v → %v, want %v → %v", i, src, dst, vip.Addr(), client.Addr())
		}
		if ipChecksum(ip[:20]) != 0 {
			t.Errorf("reply fragment %d: IP checksum does not verify", i)
		}
		if got := binary.BigEndian.Uint16(ip[4:]); got != 0x4321 {
			t.Errorf("reply fragment %d: ID %#x, want the target's %#x", i, got, 0x4321)
		}
		whole = append(whole, ip[20:]...)
	}
	// The reassembled segment, behind a header of the restored addresses.
	hdr := make([]byte, 20)
	hdr[0], hdr[9] = 0x45, uint8(TCP)
	binary.BigEndian.PutUint16(hdr[2:], uint16(20+len(whole)))
	copy(hdr[12:], vip.Addr().AsSlice())
	copy(hdr[16:], client.Addr().AsSlice())
	if l4Checksum(append(hdr, whole...)) != 0 {
		t.Error("the reassembled reply's TCP checksum does not verify")
	}
	if sp, dp := binary.BigEndian.Uint16(whole), binary.BigEndian.Uint16(whole[2:]); sp != vip.Port() || dp != client.Port() {
		t.Errorf("reassembled reply: ports %d → %d, want %d → %d", sp, dp, vip.Port(), client.Port())
	}

	after, err := f.d.Counters()
	must(t, err)
	for _, c := range []struct {
		name string
		want uint64
	}{
		{"fragmented_datagrams", 2}, // the client's datagram and the reply
		{"fragments_followed", 4},   // two later fragments of each
		{"fragments", 2},            // the untracked one and the denied datagram's second
	} {
		if got := after[c.name] - before[c.name]; got != c.want {
			t.Errorf("counter %s moved by %d, want %d", c.name, got, c.want)
		}
	}
}
