// Package steer hands the connections (TCP) and datagrams (UDP) addressed
// to any number of local address:port pairs to one socket per protocol,
// with an eBPF sk_lookup program attached to the network namespace. A
// gateway with tens of thousands of imports then holds two sockets instead
// of one listening socket per import address, and programming an import
// is one map update (about a microsecond) instead of a socket, a bind, a
// listen and an accept goroutine.
//
// The kernel runs the program when it looks for the socket of a new TCP
// connection or of a UDP datagram, after routing decided the packet is
// local and before it looks at bound sockets. A destination the map does
// not hold is left to the ordinary lookup, so the program changes nothing
// for other sockets of the namespace, and several Steerers (several
// gateways in one namespace) coexist: the first to claim a destination
// gets it. The accepted connection's local address is the destination the
// client dialed, which is how the owner tells imports apart.
//
// The program runs for every UDP datagram the namespace receives, the
// encapsulated ones of the packet mode's tunnel included (docs/packet.md),
// and for every connection's first packet. So it looks at a bitmap of the
// steered ports first (an array lookup the verifier inlines) and pays for
// the destination map, whose buckets span megabytes and miss the cache,
// only for a port that some destination uses.
//
// The attachment is a BPF link owned by the process: it goes away with
// the process (or Close), so a crashed gateway leaves nothing behind.
// Loading needs CAP_BPF and CAP_NET_ADMIN (root in the tests and the lab).
// Only IPv4 destinations are steered; callers keep a listener per address
// for IPv6 ones.
package steer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Proto is the transport protocol of a steered destination.
type Proto uint8

// Protocols a Steerer carries, each to its own socket.
const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) slot() (uint32, error) {
	switch p {
	case TCP:
		return 0, nil
	case UDP:
		return 1, nil
	}
	return 0, fmt.Errorf("protocol %d: want TCP (6) or UDP (17)", p)
}

// Dest is a destination steered to the protocol's socket.
type Dest struct {
	Addr  netip.Addr // IPv4
	Port  uint16
	Proto Proto
}

// destKey is the map key, laid out as the program builds it on its stack:
// the address in network order (as sk_lookup's local_ip4), the port in
// host order (as local_port), the protocol, a zero byte.
type destKey [8]byte

func keyOf(d Dest) (destKey, uint32, error) {
	var k destKey
	slot, err := d.Proto.slot()
	if err != nil {
		return k, 0, err
	}
	if !d.Addr.Unmap().Is4() {
		return k, 0, fmt.Errorf("destination %s: only IPv4 addresses are steered", d.Addr)
	}
	a := d.Addr.Unmap().As4()
	copy(k[:4], a[:])
	binary.NativeEndian.PutUint16(k[4:6], d.Port)
	k[6] = byte(d.Proto)
	return k, slot, nil
}

// Config configures a Steerer.
type Config struct {
	// MaxDests bounds the destinations held at once (0: 1 << 20). The map
	// allocates entries as they are added; its bucket array (a 16-byte
	// bucket per possible entry) is allocated at once.
	MaxDests int
}

// Validate checks the fields.
func (c *Config) Validate() error {
	if c.MaxDests < 0 || c.MaxDests > 1<<24 {
		return fmt.Errorf("max-dests %d: must be 0 (default %d) to %d", c.MaxDests, defaultMaxDests, 1<<24)
	}
	return nil
}

const defaultMaxDests = 1 << 20

// Steerer is a loaded and attached sk_lookup program with its maps.
type Steerer struct {
	dests *ebpf.Map // destKey → socket slot
	socks *ebpf.Map // slot → socket (SOCKMAP)
	ports *ebpf.Map // portWord → 64 bits, one per port: some destination uses it
	prog  *ebpf.Program
	link  link.Link

	mu      sync.Mutex
	held    map[destKey]struct{} // what Add was given and Remove did not take out
	perPort map[uint32]int       // protocol slot<<16 | port → destinations held on it
	words   [portWords]uint64    // the ports map as written

	closeOnce sync.Once
}

// The ports bitmap: per protocol slot, 1024 words of 64 ports each.
const (
	wordsPerSlot = 1 << 16 / 64
	portWords    = 2 * wordsPerSlot
)

// portBit is the word index and the bit of protocol slot's port.
func portBit(slot uint32, port uint16) (uint32, uint64) {
	return slot*wordsPerSlot + uint32(port)/64, 1 << (port % 64)
}

// New loads the program and attaches it to the calling process's network
// namespace. The error names what is missing when the kernel or the
// process's privileges do not allow it.
func New(cfg Config) (*Steerer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	max := cfg.MaxDests
	if max == 0 {
		max = defaultMaxDests
	}
	s := &Steerer{held: map[destKey]struct{}{}, perPort: map[uint32]int{}}
	var err error
	s.dests, err = ebpf.NewMap(&ebpf.MapSpec{Name: "strait_dests", Type: ebpf.Hash, KeySize: 8, ValueSize: 4,
		MaxEntries: uint32(max), Flags: 1 /* BPF_F_NO_PREALLOC */})
	if err != nil {
		return nil, fmt.Errorf("steer: create destination map (needs CAP_BPF): %w", err)
	}
	s.socks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "strait_socks", Type: ebpf.SockMap, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: create socket map: %w", err)
	}
	s.ports, err = ebpf.NewMap(&ebpf.MapSpec{Name: "strait_ports", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: portWords})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: create port map: %w", err)
	}
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "strait_steer", Type: ebpf.SkLookup, AttachType: ebpf.AttachSkLookup,
		License: "Apache-2.0", Instructions: program(s.dests.FD(), s.socks.FD(), s.ports.FD())})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: load sk_lookup program (kernel 5.9+, CAP_BPF): %w", err)
	}
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: %w", err)
	}
	defer ns.Close()
	if s.link, err = link.AttachNetNs(int(ns.Fd()), s.prog); err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: attach to the network namespace (CAP_NET_ADMIN): %w", err)
	}
	return s, nil
}

// sk_lookup context offsets (struct bpf_sk_lookup, include/uapi/linux/bpf.h).
const (
	ctxFamily    = 8
	ctxProtocol  = 12
	ctxLocalIP4  = 40
	ctxLocalPort = 60
	afInet       = 2
	skPass       = 1
)

// program is, in C:
//
//	if (ctx->family != AF_INET) return SK_PASS;
//	__u32 w;
//	if (ctx->protocol == IPPROTO_TCP) w = 0;
//	else if (ctx->protocol == IPPROTO_UDP) w = 1024;
//	else return SK_PASS;
//	w += ctx->local_port / 64;
//	__u64 *bits = bpf_map_lookup_elem(&ports, &w);
//	if (!bits || !(*bits >> (ctx->local_port % 64) & 1)) return SK_PASS;
//	struct key k = {ctx->local_ip4, ctx->local_port, ctx->protocol};
//	__u32 *slot = bpf_map_lookup_elem(&dests, &k);
//	if (!slot) return SK_PASS;
//	struct bpf_sock *sk = bpf_map_lookup_elem(&socks, slot);
//	if (!sk) return SK_PASS;
//	bpf_sk_assign(ctx, sk, 0);   // fails harmlessly if another program assigned one
//	bpf_sk_release(sk);
//	return SK_PASS;
func program(dests, socks, ports int) asm.Instructions {
	return slices.Concat(asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, ctxFamily, asm.Word),
		asm.JNE.Imm(asm.R2, afInet, "pass"),
		// The port's bit: R8 the protocol's first word, R9 the port.
		asm.LoadMem(asm.R7, asm.R6, ctxProtocol, asm.Word),
		asm.Mov.Imm(asm.R8, 0),
		asm.JEq.Imm(asm.R7, int32(TCP), "port"),
		asm.Mov.Imm(asm.R8, wordsPerSlot),
		asm.JNE.Imm(asm.R7, int32(UDP), "pass"),
		asm.LoadMem(asm.R9, asm.R6, ctxLocalPort, asm.Word).WithSymbol("port"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.RSh.Imm(asm.R2, 6),
		asm.Add.Reg(asm.R2, asm.R8),
		asm.StoreMem(asm.RFP, -16, asm.R2, asm.Word),
	}, lookup(ports, -16), asm.Instructions{
		asm.LoadMem(asm.R2, asm.R0, 0, asm.DWord),
		asm.And.Imm(asm.R9, 63),
		asm.RSh.Reg(asm.R2, asm.R9),
		asm.And.Imm(asm.R2, 1),
		asm.JEq.Imm(asm.R2, 0, "pass"),
		// The destination.
		asm.LoadMem(asm.R2, asm.R6, ctxLocalIP4, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, ctxLocalPort, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Half),
		asm.LoadMem(asm.R2, asm.R6, ctxProtocol, asm.Word),
		asm.StoreMem(asm.RFP, -2, asm.R2, asm.Byte),
		asm.StoreImm(asm.RFP, -1, 0, asm.Byte),
	}, lookup(dests, -8), asm.Instructions{
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, -12, asm.R2, asm.Word),
	}, lookup(socks, -12), asm.Instructions{
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnSkAssign.Call(),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.FnSkRelease.Call(),
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	})
}

// lookup is bpf_map_lookup_elem(m, fp+off), on to "pass" when m holds no
// such key; R0 points at the value after it.
func lookup(m int, off int16) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(off)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
	}
}

// SetSocket makes c (a listening TCP socket or a UDP socket, bound
// anywhere, e.g. 127.0.0.1:0; TCP from ListenTCP) the socket of protocol p's destinations.
// The map holds its own reference: c may be closed after Close.
func (s *Steerer) SetSocket(p Proto, c syscall.Conn) error {
	slot, err := p.slot()
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := rc.Control(func(fd uintptr) {
		uerr = s.socks.Update(slot, uint64(fd), ebpf.UpdateAny)
	}); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("steer: socket map: %w", uerr)
	}
	return nil
}

// ListenTCP opens a listening socket that SetSocket accepts: plain TCP.
// Go listens with MPTCP by default where the kernel has it, and an MPTCP
// socket cannot go into a socket map.
func ListenTCP(addr string) (*net.TCPListener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// Add steers the destinations to their protocol's socket (replacing
// entries already there).
func (s *Steerer) Add(ds ...Dest) error {
	if len(ds) == 0 {
		return nil
	}
	keys := make([]destKey, len(ds))
	vals := make([]uint32, len(ds))
	for i, d := range ds {
		var err error
		if keys[i], vals[i], err = keyOf(d); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The ports' bits first, so that the program never skips a
	// destination it holds. They stay set if the map refuses some of
	// them: a bit without a destination costs a lookup, nothing else.
	changed := map[uint32]bool{}
	for i, k := range keys {
		if _, ok := s.held[k]; ok {
			continue
		}
		s.held[k] = struct{}{}
		s.countPort(vals[i], ds[i].Port, 1, changed)
	}
	if err := s.writeWords(changed); err != nil {
		return err
	}
	if len(ds) > 1 {
		if _, err := s.dests.BatchUpdate(keys, vals, nil); err == nil {
			return nil
		} else if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("steer: add %d destinations: %w", len(ds), err)
		}
	}
	for i := range keys {
		if err := s.dests.Update(keys[i], vals[i], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("steer: add %s:%d: %w", ds[i].Addr, ds[i].Port, err)
		}
	}
	return nil
}

// Remove stops steering the destinations; those not steered are ignored.
func (s *Steerer) Remove(ds ...Dest) error {
	keys := make([]destKey, len(ds))
	slots := make([]uint32, len(ds))
	for i, d := range ds {
		var err error
		if keys[i], slots[i], err = keyOf(d); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.deleteDests(keys, ds); err != nil {
		return err
	}
	// The ports' bits last, once their destinations are gone.
	changed := map[uint32]bool{}
	for i, k := range keys {
		if _, ok := s.held[k]; !ok {
			continue
		}
		delete(s.held, k)
		s.countPort(slots[i], ds[i].Port, -1, changed)
	}
	return s.writeWords(changed)
}

// countPort adds delta (1 or -1) to the destinations held on protocol
// slot's port; when that makes the port used or unused, it sets or clears
// the port's bit and marks its word in changed for writeWords.
func (s *Steerer) countPort(slot uint32, port uint16, delta int, changed map[uint32]bool) {
	pk := slot<<16 | uint32(port)
	n := s.perPort[pk] + delta
	if n == 0 {
		delete(s.perPort, pk)
	} else {
		s.perPort[pk] = n
	}
	if (n > 0) == (n-delta > 0) {
		return
	}
	w, bit := portBit(slot, port)
	if n > 0 {
		s.words[w] |= bit
	} else {
		s.words[w] &^= bit
	}
	changed[w] = true
}

// writeWords writes the changed words of the ports bitmap.
func (s *Steerer) writeWords(changed map[uint32]bool) error {
	for w := range changed {
		if err := s.ports.Update(w, s.words[w], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("steer: port map: %w", err)
		}
	}
	return nil
}

// deleteDests takes keys out of the destination map.
func (s *Steerer) deleteDests(keys []destKey, ds []Dest) error {
	if len(keys) > 1 {
		// A batch stops at the first key missing; the rest go one by one.
		n, err := s.dests.BatchDelete(keys, nil)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) && !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("steer: remove %d destinations: %w", len(ds), err)
		}
		keys, ds = keys[n:], ds[n:]
	}
	for i, k := range keys {
		if err := s.dests.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("steer: remove %s:%d: %w", ds[i].Addr, ds[i].Port, err)
		}
	}
	return nil
}

// Len counts the destinations steered now (it walks the map).
func (s *Steerer) Len() int {
	var k destKey
	var v uint32
	n := 0
	for it := s.dests.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}

// Close detaches the program and frees the maps. It is idempotent.
func (s *Steerer) Close() error {
	s.closeOnce.Do(func() {
		if s.link != nil {
			s.link.Close()
		}
		if s.prog != nil {
			s.prog.Close()
		}
		if s.socks != nil {
			s.socks.Close()
		}
		if s.dests != nil {
			s.dests.Close()
		}
		if s.ports != nil {
			s.ports.Close()
		}
	})
	return nil
}
