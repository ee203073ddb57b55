package packet

import (
	"bytes"
	"encoding"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
)

// TestLayouts checks every Go encoding against the size of its C struct in
// the compiled object's BTF.
func TestLayouts(t *testing.T) {
	spec, err := loadPacket()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ string
		v   encoding.BinaryMarshaler
	}{
		{"svc_key", Service{netip.MustParseAddr("10.0.0.1"), 80, TCP}},
		{"import_val", Import{}},
		{"table_info", tableInfo{}},
		{"flow_key", Flow{netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), TCP}},
		{"peer_val", Peer{}},
		{"export_val", Export{Target: netip.MustParseAddrPort("10.0.0.1:1")}},
		{"policy_key", PolicyKey{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{"policy_val", Verdict{}},
		{"config", settings{}},
	} {
		var st *btf.Struct
		if err := spec.Types.TypeByName(c.typ, &st); err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		b, err := c.v.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		if int(st.Size) != len(b) {
			t.Errorf("struct %s is %d bytes in C, %d in Go", c.typ, st.Size, len(b))
		}
	}
}

func TestEncodingErrors(t *testing.T) {
	v6 := netip.MustParseAddr("fd00::1")
	for _, c := range []struct {
		name string
		v    encoding.BinaryMarshaler
		want string
	}{
		{"v6 service", Service{v6, 80, TCP}, "IPv4 only"},
		{"port 0", Service{netip.MustParseAddr("10.0.0.1"), 0, TCP}, "port 0"},
		{"sctp", Service{netip.MustParseAddr("10.0.0.1"), 80, 132}, "allowed 6 (TCP), 17 (UDP)"},
		{"target port 0", Export{Target: netip.MustParseAddrPort("10.0.0.1:0")}, "port 0"},
		{"v6 prefix", PolicyKey{Prefix: netip.MustParsePrefix("fd00::/8")}, "IPv4 prefix"},
		{"rule", Verdict{Rule: maxRules}, "at most"},
		{"idle", settings{Idle: -time.Second}, "negative"},
	} {
		_, err := c.v.MarshalBinary()
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := ParseProto("sctp"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("allowed TCP, UDP")) {
		t.Errorf("ParseProto(sctp): %v", err)
	}
}

type codec interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// roundTrip decodes b into v and, if that works, checks that encoding
// gives b back: a decoder that accepts bytes the encoder would never write
// would let a corrupt map entry pass as a valid one.
func roundTrip(t *testing.T, name string, v codec, b []byte) {
	if err := v.UnmarshalBinary(b); err != nil {
		return
	}
	out, err := v.MarshalBinary()
	if err != nil {
		t.Fatalf("%s: decoded %x but cannot encode it: %v", name, b, err)
	}
	if !bytes.Equal(out, b) {
		t.Fatalf("%s: %x decodes to %+v, which encodes to %x", name, b, v, out)
	}
}

func FuzzMapEncodings(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{10, 0, 0, 1, 0, 80, 6, 0})
	f.Add([]byte{10, 0, 0, 1, 0, 0, 17, 0})
	f.Add([]byte{10, 0, 0, 1, 0, 80, 6, 1})
	f.Add(bytes.Repeat([]byte{0xff}, 16))
	f.Add(append([]byte{96, 0, 0, 0}, bytes.Repeat([]byte{0xff}, 12)...))
	f.Add(append([]byte{63, 0, 0, 0}, make([]byte, 12)...))
	f.Add(append([]byte{80, 0, 0, 0}, make([]byte, 12)...))
	f.Add(make([]byte, 32))
	f.Add(append(make([]byte, 24), bytes.Repeat([]byte{0xff}, 8)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, "service", &Service{}, b)
		roundTrip(t, "import", &Import{}, b)
		roundTrip(t, "table", &tableInfo{}, b)
		roundTrip(t, "flow", &Flow{}, b)
		roundTrip(t, "peer", &Peer{}, b)
		roundTrip(t, "export", &Export{}, b)
		roundTrip(t, "policy key", &PolicyKey{}, b)
		roundTrip(t, "verdict", &Verdict{}, b)
		roundTrip(t, "settings", &settings{}, b)
	})
}
