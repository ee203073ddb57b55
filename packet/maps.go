package packet

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"
)

// The encodings below are the byte layouts of bpf/packet.c's map keys and
// values: addresses and ports in network order as the packet carries them,
// IDs and flags in the host's order. TestLayouts checks every size against
// the BTF of the compiled object, so C and Go cannot drift apart silently.

// Proto is an IP protocol the programs translate.
type Proto uint8

// The protocols of export and import ports.
const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// ParseProto reads a port protocol as export and import resources spell
// it; the empty string is TCP, as in Kubernetes.
func ParseProto(s string) (Proto, error) {
	switch strings.ToUpper(s) {
	case "", "TCP":
		return TCP, nil
	case "UDP":
		return UDP, nil
	}
	return 0, fmt.Errorf("protocol %q: allowed TCP, UDP", s)
}

func (p Proto) valid() error {
	if p != TCP && p != UDP {
		return fmt.Errorf("protocol %d: allowed %d (TCP), %d (UDP)", uint8(p), TCP, UDP)
	}
	return nil
}

var ne = binary.NativeEndian

func putAddr(b []byte, field string, a netip.Addr) error {
	a = a.Unmap()
	if !a.Is4() {
		return fmt.Errorf("%s %v: the packet mode carries IPv4 only", field, a)
	}
	v := a.As4()
	copy(b, v[:])
	return nil
}

func getAddr(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }

func checkLen(what string, b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(b), n)
	}
	return nil
}

func checkZero(what string, b []byte) error {
	for _, c := range b {
		if c != 0 {
			return fmt.Errorf("%s: padding is not zero", what)
		}
	}
	return nil
}

// Service is a clusterset IP, port and protocol: the key of the imports
// map (what clients connect to here) and of the exports map (what peers
// send to us).
type Service struct {
	Addr  netip.Addr
	Port  uint16
	Proto Proto
}

const serviceLen = 8

func (s Service) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(s.Addr, s.Port), s.Proto)
}

// MarshalBinary encodes struct svc_key.
func (s Service) MarshalBinary() ([]byte, error) {
	b := make([]byte, serviceLen)
	if err := putAddr(b, "service address", s.Addr); err != nil {
		return nil, err
	}
	if s.Port == 0 {
		return nil, fmt.Errorf("service %v: port 0: allowed 1..65535", s.Addr)
	}
	if err := s.Proto.valid(); err != nil {
		return nil, fmt.Errorf("service %v: %w", s.Addr, err)
	}
	binary.BigEndian.PutUint16(b[4:], s.Port)
	b[6] = uint8(s.Proto)
	return b, nil
}

// UnmarshalBinary decodes struct svc_key.
func (s *Service) UnmarshalBinary(b []byte) error {
	if err := checkLen("service key", b, serviceLen); err != nil {
		return err
	}
	if err := checkZero("service key", b[7:]); err != nil {
		return err
	}
	v := Service{Addr: getAddr(b), Port: binary.BigEndian.Uint16(b[4:]), Proto: Proto(b[6])}
	if v.Port == 0 {
		return fmt.Errorf("service key: port 0")
	}
	if err := v.Proto.valid(); err != nil {
		return fmt.Errorf("service key: %w", err)
	}
	*s = v
	return nil
}

// Import is what the imports map says about an import's Service.
type Import struct {
	// ID names the import in policy keys (PolicyKey.Service).
	ID uint32
	// Table is the exporting cluster's Maglev table: an index into the
	// tables map, below Config.Tables.
	Table uint32
}

const importLen = 8

// MarshalBinary encodes struct import_val.
func (v Import) MarshalBinary() ([]byte, error) {
	b := make([]byte, importLen)
	ne.PutUint32(b, v.ID)
	ne.PutUint32(b[4:], v.Table)
	return b, nil
}

// UnmarshalBinary decodes struct import_val.
func (v *Import) UnmarshalBinary(b []byte) error {
	if err := checkLen("import value", b, importLen); err != nil {
		return err
	}
	*v = Import{ID: ne.Uint32(b), Table: ne.Uint32(b[4:])}
	return nil
}

// tableInfo places one cluster's Maglev table in the maglev map.
type tableInfo struct {
	Seed uint64 // ring's mixed key seed
	Size uint32 // buckets; 0 means no table
	Base uint32 // index of bucket 0 in the maglev map
}

const tableInfoLen = 16

func (v tableInfo) MarshalBinary() ([]byte, error) {
	b := make([]byte, tableInfoLen)
	ne.PutUint64(b, v.Seed)
	ne.PutUint32(b[8:], v.Size)
	ne.PutUint32(b[12:], v.Base)
	return b, nil
}

func (v *tableInfo) UnmarshalBinary(b []byte) error {
	if err := checkLen("table info", b, tableInfoLen); err != nil {
		return err
	}
	*v = tableInfo{Seed: ne.Uint64(b), Size: ne.Uint32(b[8:]), Base: ne.Uint32(b[12:])}
	return nil
}

// Flow is a key of the flows map: a client's 5-tuple toward an import.
type Flow struct {
	Src, Dst netip.AddrPort
	Proto    Proto
}

const flowLen = 16

// MarshalBinary encodes struct flow_key.
func (f Flow) MarshalBinary() ([]byte, error) {
	b := make([]byte, flowLen)
	if err := putAddr(b, "flow source", f.Src.Addr()); err != nil {
		return nil, err
	}
	if err := putAddr(b[4:], "flow destination", f.Dst.Addr()); err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(b[8:], f.Src.Port())
	binary.BigEndian.PutUint16(b[10:], f.Dst.Port())
	b[12] = uint8(f.Proto)
	return b, nil
}

// UnmarshalBinary decodes struct flow_key.
func (f *Flow) UnmarshalBinary(b []byte) error {
	if err := checkLen("flow key", b, flowLen); err != nil {
		return err
	}
	if err := checkZero("flow key", b[13:]); err != nil {
		return err
	}
	*f = Flow{
		Src:   netip.AddrPortFrom(getAddr(b), binary.BigEndian.Uint16(b[8:])),
		Dst:   netip.AddrPortFrom(getAddr(b[4:]), binary.BigEndian.Uint16(b[10:])),
		Proto: Proto(b[12]),
	}
	return nil
}

// addrValue is a map value holding one IPv4 address (a flow's gateway, a
// Maglev bucket's owner; the zero address means none).
type addrValue struct{ Addr netip.Addr }

const (
	addrValueLen = 4
	flowValueLen = 16 // struct flow_val
)

func (v addrValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, addrValueLen)
	if !v.Addr.IsValid() {
		return b, nil
	}
	if err := putAddr(b, "gateway", v.Addr); err != nil {
		return nil, err
	}
	return b, nil
}

func (v *addrValue) UnmarshalBinary(b []byte) error {
	// The flows map's value has the route toward the client (and the
	// peers epoch its gateway was last found alive at) after the address.
	if len(b) != addrValueLen && len(b) != flowValueLen {
		return fmt.Errorf("address value: %d bytes, want %d or %d", len(b), addrValueLen, flowValueLen)
	}
	v.Addr = getAddr(b)
	if v.Addr.IsUnspecified() {
		v.Addr = netip.Addr{}
	}
	return nil
}

// Peer is what the peers map says about a peer gateway's underlay address.
type Peer struct {
	// Cluster is the peer's cluster ID in policy keys; 0 is this cluster.
	Cluster uint32
	// Alive gateways take new flows; a dead one's pinned flows move.
	Alive bool
	// MSS is what TCP SYNs to and from this gateway are clamped to, sized
	// for the route to it (MSSFor); 0: the programs' one (Config.MSS,
	// sized for the narrowest route to any peer).
	MSS uint16
}

const (
	peerLen      = 8
	peerAlive    = 1
	peerMSSShift = 16 // the MSS is the flags' high half
)

// MarshalBinary encodes struct peer_val.
func (v Peer) MarshalBinary() ([]byte, error) {
	b := make([]byte, peerLen)
	ne.PutUint32(b, v.Cluster)
	flags := uint32(v.MSS) << peerMSSShift
	if v.Alive {
		flags |= peerAlive
	}
	ne.PutUint32(b[4:], flags)
	return b, nil
}

// UnmarshalBinary decodes struct peer_val.
func (v *Peer) UnmarshalBinary(b []byte) error {
	if err := checkLen("peer value", b, peerLen); err != nil {
		return err
	}
	flags := ne.Uint32(b[4:])
	if flags&^(peerAlive|0xffff<<peerMSSShift) != 0 {
		return fmt.Errorf("peer value: unknown flags %#x", flags)
	}
	*v = Peer{Cluster: ne.Uint32(b), Alive: flags&peerAlive != 0, MSS: uint16(flags >> peerMSSShift)}
	return nil
}

// Export is what the exports map says about an exported Service: where
// its packets go.
type Export struct {
	Target netip.AddrPort
	// ID names the export in policy keys (PolicyKey.Service).
	ID uint32
}

const exportLen = 12

// MarshalBinary encodes struct export_val.
func (v Export) MarshalBinary() ([]byte, error) {
	b := make([]byte, exportLen)
	if err := putAddr(b, "export target", v.Target.Addr()); err != nil {
		return nil, err
	}
	if v.Target.Port() == 0 {
		return nil, fmt.Errorf("export target %v: port 0: allowed 1..65535", v.Target)
	}
	binary.BigEndian.PutUint16(b[4:], v.Target.Port())
	ne.PutUint32(b[8:], v.ID)
	return b, nil
}

// UnmarshalBinary decodes struct export_val.
func (v *Export) UnmarshalBinary(b []byte) error {
	if err := checkLen("export value", b, exportLen); err != nil {
		return err
	}
	if err := checkZero("export value", b[6:8]); err != nil {
		return err
	}
	t := netip.AddrPortFrom(getAddr(b), binary.BigEndian.Uint16(b[4:]))
	if t.Port() == 0 {
		return fmt.Errorf("export value: target port 0")
	}
	*v = Export{Target: t, ID: ne.Uint32(b[8:])}
	return nil
}

// PolicyKey is a key of the policy map (an LPM trie): the source cluster
// (0 for this cluster's own clients, at egress), the import or export ID,
// and the prefix of client addresses it covers.
type PolicyKey struct {
	Cluster uint32
	Service uint32
	Prefix  netip.Prefix
}

const policyKeyLen = 16

// MarshalBinary encodes struct policy_key; the trie's prefix length counts
// the 64 bits of cluster and service, which always match in full.
func (k PolicyKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, policyKeyLen)
	p := k.Prefix.Masked()
	if !p.IsValid() || !p.Addr().Is4() {
		return nil, fmt.Errorf("policy prefix %v: want an IPv4 prefix", k.Prefix)
	}
	ne.PutUint32(b, uint32(64+p.Bits()))
	ne.PutUint32(b[4:], k.Cluster)
	ne.PutUint32(b[8:], k.Service)
	a := p.Addr().As4()
	copy(b[12:], a[:])
	return b, nil
}

// UnmarshalBinary decodes struct policy_key.
func (k *PolicyKey) UnmarshalBinary(b []byte) error {
	if err := checkLen("policy key", b, policyKeyLen); err != nil {
		return err
	}
	n := ne.Uint32(b)
	if n < 64 || n > 96 {
		return fmt.Errorf("policy key: prefix length %d: allowed 64..96", n)
	}
	p := netip.PrefixFrom(getAddr(b[12:]), int(n-64))
	if p.Masked() != p {
		return fmt.Errorf("policy key: %v has bits past its length", p)
	}
	*k = PolicyKey{Cluster: ne.Uint32(b[4:]), Service: ne.Uint32(b[8:]), Prefix: p}
	return nil
}

// Verdict is a policy map value: allow or deny, and the rule that decided
// (an index into Rules of a compiled policy; 0 is the default deny).
type Verdict struct {
	Allow bool
	Rule  uint32
}

const verdictLen = 8

// MarshalBinary encodes struct policy_val.
func (v Verdict) MarshalBinary() ([]byte, error) {
	if v.Rule >= maxRules {
		return nil, fmt.Errorf("policy rule %d: at most %d rules", v.Rule, maxRules)
	}
	b := make([]byte, verdictLen)
	if v.Allow {
		ne.PutUint32(b, 1)
	}
	ne.PutUint32(b[4:], v.Rule)
	return b, nil
}

// UnmarshalBinary decodes struct policy_val.
func (v *Verdict) UnmarshalBinary(b []byte) error {
	if err := checkLen("policy value", b, verdictLen); err != nil {
		return err
	}
	allow := ne.Uint32(b)
	if allow > 1 {
		return fmt.Errorf("policy value: allow %d: want 0 or 1", allow)
	}
	rule := ne.Uint32(b[4:])
	if rule >= maxRules {
		return fmt.Errorf("policy value: rule %d: at most %d rules", rule, maxRules)
	}
	*v = Verdict{Allow: allow == 1, Rule: rule}
	return nil
}

// settings is the config map's one value.
type settings struct {
	TunIfindex uint32
	VNI        uint32
	SNAT       netip.Addr
	MSS        uint16
	PortMin    uint16
	PortMax    uint16
	ProbePort  uint16 // 0: the programs answer no probe
	// LANQuiet: the programs leave the LAN's health probes to the stack,
	// which refuses them (Datapath.SetLANProbes).
	LANQuiet bool
	Idle     time.Duration
}

const settingsLen = 32

func (s settings) MarshalBinary() ([]byte, error) {
	b := make([]byte, settingsLen)
	ne.PutUint32(b, s.TunIfindex)
	ne.PutUint32(b[4:], s.VNI)
	if s.SNAT.IsValid() {
		if err := putAddr(b[8:], "snat address", s.SNAT); err != nil {
			return nil, err
		}
	}
	ne.PutUint16(b[12:], s.MSS)
	ne.PutUint16(b[14:], s.PortMin)
	ne.PutUint16(b[16:], s.PortMax)
	ne.PutUint16(b[18:], s.ProbePort)
	if s.LANQuiet {
		ne.PutUint32(b[20:], 1)
	}
	if s.Idle < 0 {
		return nil, fmt.Errorf("idle %v: must not be negative", s.Idle)
	}
	ne.PutUint64(b[24:], uint64(s.Idle))
	return b, nil
}

func (s *settings) UnmarshalBinary(b []byte) error {
	if err := checkLen("settings", b, settingsLen); err != nil {
		return err
	}
	quiet := ne.Uint32(b[20:])
	if quiet > 1 {
		return fmt.Errorf("settings: lan_quiet %d: want 0 or 1", quiet)
	}
	idle := ne.Uint64(b[24:])
	if idle > math.MaxInt64 {
		return fmt.Errorf("settings: idle %d ns out of range", idle)
	}
	*s = settings{
		TunIfindex: ne.Uint32(b), VNI: ne.Uint32(b[4:]), SNAT: getAddr(b[8:]),
		MSS: ne.Uint16(b[12:]), PortMin: ne.Uint16(b[14:]), PortMax: ne.Uint16(b[16:]),
		ProbePort: ne.Uint16(b[18:]), LANQuiet: quiet == 1, Idle: time.Duration(idle),
	}
	return nil
}
