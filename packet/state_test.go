package packet

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

const exampleState = `
clusters:
  - name: b
    gateways: {gw-b1: 192.0.2.2, gw-b2: 192.0.2.3}
    down: [gw-b2]
imports:
  - {address: 10.96.0.10, port: 80, protocol: TCP, id: 1, cluster: b}
  - {address: 10.96.0.10, port: 53, protocol: udp, id: 2, cluster: b}
exports:
  - {address: 10.96.0.11, port: 80, id: 3, target: 10.2.0.2:8080}
peers:
  - {address: 192.0.2.2, cluster: 1}
  - {address: 192.0.2.3, cluster: 1, down: true}
policy:
  - {cluster: 0, service: 1, prefix: 0.0.0.0/0}
  - {cluster: 1, service: 3, prefix: 10.1.0.0/16}
`

func TestParseState(t *testing.T) {
	s, err := ParseState(strings.NewReader(exampleState))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.compile()
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.96.0.10")
	if got := c.imports[Service{vip, 53, UDP}]; got != (Import{ID: 2, Table: 0}) {
		t.Errorf("UDP import: %+v", got)
	}
	if c.tables[0].Buckets("gw-b2") != 0 || !c.tables[0].Down("gw-b2") {
		t.Error("gw-b2 is down but keeps buckets")
	}
	if p := c.peers[netip.MustParseAddr("192.0.2.3")]; p.Alive {
		t.Error("peer 192.0.2.3 is down but alive")
	}
	if len(c.policy) != 2 {
		t.Errorf("policy entries: %v", c.policy)
	}
}

func TestParseStateErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"imports: [{address: 10.0.0.1, port: 80, id: 1, cluster: x}]", `imports[0].cluster "x"`},
		{"imports: [{address: fd00::1, port: 80, cluster: x}]", "imports[0].address"},
		{"exports: [{address: 10.0.0.1, port: 80, target: 10.0.0.2}]", "exports[0].target"},
		{"exports: [{address: 10.0.0.1, port: 80, protocol: SCTP, target: 10.0.0.2:1}]", "exports[0].protocol \"SCTP\": allowed TCP, UDP"},
		{"exports: [{address: 10.0.0.1, target: 10.0.0.2:1}]", "exports[0].port"},
		{"peers: [{address: nope}]", "peers[0].address"},
		{"policy: [{prefix: 10.0.0.0}]", "policy[0].prefix"},
		{"clusters: [{name: b, gateways: {g: 10.0.0.1}, down: [h]}]", "clusters[0].down"},
		{"clusters: [{gateways: {g: 10.0.0.1}}]", "clusters[0].name"},
		{"imports: [{adress: 10.0.0.1}]", "field adress not found"},
	} {
		_, err := ParseState(strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
}

// TestStateApply applies a state to loaded maps twice — the second one
// smaller — and reads back that entries it no longer lists are gone.
func TestStateApply(t *testing.T) {
	d := loadTest(t, Config{})
	s, err := ParseState(strings.NewReader(exampleState))
	must(t, err)
	must(t, s.Apply(d))
	var n int
	var k, v []byte
	it := d.coll.Maps["imports"].Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if n != 2 {
		t.Fatalf("imports map holds %d entries, want 2", n)
	}
	s.Imports = s.Imports[:1]
	s.Policy = nil
	must(t, s.Apply(d))
	for name, want := range map[string]int{"imports": 1, "policy": 0, "exports": 1, "peers": 2} {
		n = 0
		it := d.coll.Maps[name].Iterate()
		for it.Next(&k, &v) {
			n++
		}
		if n != want {
			t.Errorf("%s map holds %d entries, want %d", name, n, want)
		}
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(exampleState))
	f.Add([]byte(""))
	f.Add([]byte("imports: [{address: 10.0.0.1, port: 65535, protocol: UDP, id: 4294967295, cluster: b}]\nclusters: [{name: b, gateways: {}}]"))
	f.Add([]byte("clusters: [{name: b, seed: 18446744073709551615, gateways: {g: 255.255.255.255}}]"))
	f.Add([]byte("policy: [{cluster: 4294967295, service: 0, prefix: 0.0.0.0/0, deny: true}]"))
	f.Add([]byte("exports: [{address: 10.0.0.1, port: 65536, target: 10.0.0.2:1}]"))
	f.Add([]byte("peers: [{address: \"\xff\xfe\"}]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseState(bytes.NewReader(b))
		if err != nil {
			return
		}
		// A state that parses compiles to entries every encoder accepts.
		c, err := s.compile()
		if err != nil {
			t.Fatalf("parsed but does not compile: %v", err)
		}
		for k, v := range c.imports {
			if _, err := k.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
			_, _ = v.MarshalBinary()
		}
		for k, v := range c.exports {
			if _, err := k.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
			if _, err := v.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
		}
		for k := range c.policy {
			if _, err := k.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
