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
