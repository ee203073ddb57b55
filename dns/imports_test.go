package dns

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func TestImportValidate(t *testing.T) {
	ep := Endpoint{Hostname: "h", Cluster: "c1", Addrs: mustAddrs("10.0.0.1")}
	tests := []struct {
		name string
		imp  Import
		err  string // substring; "" means valid
	}{
		{name: "clustersetip", imp: Import{Type: ClusterSetIP, IPs: mustAddrs("10.0.0.1", "fd00::1"), Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}, {Protocol: "udp", Port: 53}}}},
		{name: "headless", imp: Import{Type: Headless, Endpoints: []Endpoint{ep, {Cluster: "c2", Addrs: mustAddrs("fd00::2")}}}},
		{name: "no type", imp: Import{}, err: "type:"},
		{name: "zero ip", imp: Import{Type: ClusterSetIP, IPs: []netip.Addr{{}}}, err: "ips[0]"},
		{name: "mapped ip", imp: Import{Type: ClusterSetIP, IPs: mustAddrs("::ffff:10.0.0.1")}, err: "IPv4-mapped"},
		{name: "zoned ip", imp: Import{Type: ClusterSetIP, IPs: mustAddrs("fe80::1%eth0")}, err: "zone"},
		{name: "clustersetip with endpoints", imp: Import{Type: ClusterSetIP, Endpoints: []Endpoint{ep}}, err: "endpoints"},
		{name: "headless with ips", imp: Import{Type: Headless, IPs: mustAddrs("10.0.0.1")}, err: "ips"},
		{name: "bad cluster", imp: Import{Type: Headless, Endpoints: []Endpoint{{Cluster: "a.b", Addrs: mustAddrs("10.0.0.1")}}}, err: "endpoints[0].cluster"},
		{name: "bad hostname", imp: Import{Type: Headless, Endpoints: []Endpoint{{Hostname: "-x", Cluster: "c", Addrs: mustAddrs("10.0.0.1")}}}, err: "endpoints[0].hostname"},
		{name: "no addrs", imp: Import{Type: Headless, Endpoints: []Endpoint{{Cluster: "c"}}}, err: "endpoints[0].addrs"},
		{name: "port name upper", imp: Import{Type: ClusterSetIP, Ports: []Port{{Name: "HTTP", Protocol: "TCP", Port: 80}}}, err: "ports[0].name"},
		{name: "port name long", imp: Import{Type: ClusterSetIP, Ports: []Port{{Name: "a-very-long-port-name", Protocol: "TCP", Port: 80}}}, err: "ports[0].name"},
		{name: "port proto", imp: Import{Type: ClusterSetIP, Ports: []Port{{Name: "x", Protocol: "QUIC", Port: 80}}}, err: "ports[0].protocol"},
		{name: "port zero", imp: Import{Type: ClusterSetIP, Ports: []Port{{Name: "x", Protocol: "SCTP"}}}, err: "ports[0].port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.imp.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	var st Static // zero value is usable
	if _, ok := st.LookupImport("a", "b"); ok || st.HasNamespace("a") {
		t.Fatal("empty Static found something")
	}
	ips := mustAddrs("10.0.0.1")
	if err := st.Put("NS", "Web", Import{Type: ClusterSetIP, IPs: ips}); err != nil {
		t.Fatal(err)
	}
	ips[0] = netip.MustParseAddr("10.9.9.9") // the caller's slice is not shared
	imp, ok := st.LookupImport("ns", "web")
	if !ok || imp.IPs[0] != netip.MustParseAddr("10.0.0.1") || !st.HasNamespace("ns") {
		t.Fatalf("lookup after Put: %v %v", imp, ok)
	}
	if err := st.Put("ns", "bad_name", Import{Type: ClusterSetIP}); err == nil || !strings.Contains(err.Error(), "ns/bad_name: name") {
		t.Fatalf("Put bad name: %v", err)
	}
	if err := st.Put("ns", "web2", Import{}); err == nil || !strings.Contains(err.Error(), "ns/web2: type") {
		t.Fatalf("Put bad import: %v", err)
	}
	st.Delete("ns", "WEB")
	st.Delete("ns", "web") // again: no-op
	if _, ok := st.LookupImport("ns", "web"); ok || st.HasNamespace("ns") {
		t.Fatal("found after Delete")
	}
	// Set is all or nothing.
	if err := st.Set(map[ImportKey]Import{{"a", "x"}: {Type: ClusterSetIP}, {"a", "y"}: {}}); err == nil {
		t.Fatal("Set with an invalid import: no error")
	}
	if st.HasNamespace("a") {
		t.Fatal("failed Set changed the table")
	}
}

func TestStaticLookupAddr(t *testing.T) {
	var st Static
	shared := mustAddrs("10.0.0.9")
	for _, n := range []string{"zeta", "alpha"} {
		if err := st.Put("ns", n, Import{Type: Headless, Endpoints: []Endpoint{{Cluster: "c1", Addrs: shared}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put("ns", "vip", Import{Type: ClusterSetIP, IPs: mustAddrs("fd00::5")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		want AddrOwner
		ok   bool
	}{
		{"10.0.0.9", AddrOwner{Namespace: "ns", Name: "alpha", Cluster: "c1", Hostname: "10-0-0-9"}, true},
		{"::ffff:10.0.0.9", AddrOwner{Namespace: "ns", Name: "alpha", Cluster: "c1", Hostname: "10-0-0-9"}, true},
		{"fd00::5", AddrOwner{Namespace: "ns", Name: "vip"}, true},
		{"10.0.0.1", AddrOwner{}, false},
	}
	for _, tt := range tests {
		got, ok := st.LookupAddr(netip.MustParseAddr(tt.addr))
		if got != tt.want || ok != tt.ok {
			t.Errorf("LookupAddr(%s) = %+v %v, want %+v %v", tt.addr, got, ok, tt.want, tt.ok)
		}
	}
	st.Delete("ns", "alpha")
	if got, _ := st.LookupAddr(netip.MustParseAddr("10.0.0.9")); got.Name != "zeta" {
		t.Errorf("after deleting alpha: owner %+v, want zeta", got)
	}
}

// TestStaticConcurrent is for -race: readers never block or see torn state
// while writers replace imports.
func TestStaticConcurrent(t *testing.T) {
	var st Static
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if imp, ok := st.LookupImport("ns", "web"); ok && len(imp.IPs) != 1 {
					t.Error("torn import")
					return
				}
				st.HasNamespace("ns")
			}
		})
	}
	for i := range 200 {
		if err := st.Put("ns", "web", Import{Type: ClusterSetIP, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})}}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			st.Delete("ns", "web")
		}
	}
	close(stop)
	wg.Wait()
}

// TestStaticUpdate checks that batches applied in place answer as the same
// imports set at once would: the in-place claim bookkeeping (addresses
// moving, shared, released) must not drift from a fresh table.
func TestStaticUpdate(t *testing.T) {
	var inc Static
	want := map[ImportKey]Import{}
	vip := func(i int) Import {
		return Import{Type: ClusterSetIP, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)})}}
	}
	steps := []struct {
		put map[ImportKey]Import
		del []ImportKey
	}{
		{put: map[ImportKey]Import{{"a", "x"}: vip(1), {"a", "y"}: vip(2), {"b", "z"}: vip(1)}},
		{put: map[ImportKey]Import{{"a", "x"}: vip(3)}},  // x moves: 10.0.0.1 is z's alone
		{del: []ImportKey{{"B", "Z"}, {"c", "missing"}}}, // case-folded, missing is fine
		{put: map[ImportKey]Import{{"c", "h"}: {Type: Headless, Endpoints: []Endpoint{{Cluster: "c1", Addrs: mustAddrs("10.0.0.2", "10.0.0.2")}}}}},
		{put: map[ImportKey]Import{{"a", "y"}: vip(4)}, del: []ImportKey{{"a", "y"}}}, // put wins
		{del: []ImportKey{{"c", "h"}, {"a", "x"}}},
	}
	for i, st := range steps {
		if err := inc.Update(st.put, st.del); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for _, k := range st.del {
			delete(want, ImportKey{strings.ToLower(k.Namespace), strings.ToLower(k.Name)})
		}
		for k, imp := range st.put {
			want[k] = imp
		}
		var full Static
		if err := full.Set(want); err != nil {
			t.Fatal(err)
		}
		if inc.Len() != full.Len() {
			t.Fatalf("step %d: %d imports, want %d", i, inc.Len(), full.Len())
		}
		for _, ns := range []string{"a", "b", "c"} {
			if inc.HasNamespace(ns) != full.HasNamespace(ns) {
				t.Errorf("step %d: HasNamespace(%s) = %v, want %v", i, ns, inc.HasNamespace(ns), full.HasNamespace(ns))
			}
		}
		for j := range 5 {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(j)})
			got, gok := inc.LookupAddr(a)
			w, wok := full.LookupAddr(a)
			if got != w || gok != wok {
				t.Errorf("step %d: LookupAddr(%s) = %+v %v, want %+v %v", i, a, got, gok, w, wok)
			}
		}
	}
	// All or nothing: an invalid import in the batch changes nothing.
	if err := inc.Update(map[ImportKey]Import{{"d", "ok"}: vip(9), {"d", "bad"}: {}}, []ImportKey{{"a", "y"}}); err == nil || !strings.Contains(err.Error(), "d/bad: type") {
		t.Fatalf("Update with an invalid import: %v", err)
	}
	if _, ok := inc.LookupImport("a", "y"); !ok || inc.HasNamespace("d") {
		t.Fatal("failed Update changed the table")
	}
}
