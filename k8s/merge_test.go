package k8s

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
)

func TestMerge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	http := catalog.ServicePort{Name: "http", Protocol: catalog.TCP, Port: 80}
	exp := func(cluster string, age int, typ mcs.ServiceImportType, ports ...catalog.ServicePort) ClusterExport {
		return ClusterExport{Cluster: cluster, Namespace: "ns", Name: "svc", Type: typ, Ports: ports, Created: t0.Add(time.Duration(age) * time.Second)}
	}
	tests := []struct {
		name      string
		in        []ClusterExport
		winner    string
		typ       mcs.ServiceImportType
		ports     []catalog.ServicePort
		conflicts map[string]string // cluster → reasons
		msg       string            // substring of the loser's message
	}{
		{
			name: "one export", in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http)},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
		},
		{
			name:   "same ports agree",
			in:     []ClusterExport{exp("b", 1, mcs.ClusterSetIP, http), exp("a", 0, mcs.ClusterSetIP, http)},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
		},
		{
			name:   "oldest decides the type",
			in:     []ClusterExport{exp("a", 5, mcs.ClusterSetIP, http), exp("b", 1, mcs.Headless, http)},
			winner: "b", typ: mcs.Headless, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"a": "TypeConflict"}, msg: "type ClusterSetIP, clusterset uses Headless",
		},
		{
			name:   "equal age: cluster ID decides, the same everywhere",
			in:     []ClusterExport{exp("b", 0, mcs.Headless, http), exp("a", 0, mcs.ClusterSetIP, http)},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"b": "TypeConflict"},
		},
		{
			name: "ports are merged: the union",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http),
				exp("b", 1, mcs.ClusterSetIP, catalog.ServicePort{Name: "metrics", Port: 9090})},
			winner: "a", typ: mcs.ClusterSetIP,
			ports: []catalog.ServicePort{http, {Name: "metrics", Protocol: catalog.TCP, Port: 9090}},
		},
		{
			name: "same name, other number: the oldest wins the name",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http),
				exp("b", 1, mcs.ClusterSetIP, catalog.ServicePort{Name: "http", Protocol: catalog.TCP, Port: 8080})},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"b": "PortConflict"}, msg: `port "http" is TCP/8080, clusterset uses TCP/80`,
		},
		{
			name: "same name, other protocol",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http),
				exp("b", 1, mcs.ClusterSetIP, catalog.ServicePort{Name: "http", Protocol: catalog.UDP, Port: 80})},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"b": "PortConflict"},
		},
		{
			name: "same protocol and number under another name",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http),
				exp("b", 1, mcs.ClusterSetIP, catalog.ServicePort{Name: "web", Port: 80})},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"b": "PortConflict"}, msg: `port TCP/80 is named "web", clusterset names it "http"`,
		},
		{
			name: "unnamed ports match by protocol and number",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, catalog.ServicePort{Port: 80}),
				exp("b", 1, mcs.ClusterSetIP, catalog.ServicePort{Port: 80, Protocol: catalog.TCP}, catalog.ServicePort{Port: 53, Protocol: catalog.UDP})},
			winner: "a", typ: mcs.ClusterSetIP,
			ports: []catalog.ServicePort{{Protocol: catalog.UDP, Port: 53}, {Protocol: catalog.TCP, Port: 80}},
		},
		{
			name: "type and ports both",
			in: []ClusterExport{exp("a", 0, mcs.ClusterSetIP, http),
				exp("c", 2, mcs.Headless, catalog.ServicePort{Name: "http", Port: 81})},
			winner: "a", typ: mcs.ClusterSetIP, ports: []catalog.ServicePort{http},
			conflicts: map[string]string{"c": "TypeConflict,PortConflict"}, msg: "cluster a's export is the oldest",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.in)
			s := got[ServiceKey{"ns", "svc"}]
			if len(got) != 1 || s == nil {
				t.Fatalf("Merge: %d services, want ns/svc only", len(got))
			}
			if s.Winner != tt.winner || s.Type != tt.typ {
				t.Errorf("winner %s type %s, want %s %s", s.Winner, s.Type, tt.winner, tt.typ)
			}
			if len(s.Clusters) != len(tt.in) {
				t.Errorf("clusters %v: every exporter must stay a source", s.Clusters)
			}
			if !equalPorts(s.Ports, tt.ports) {
				t.Errorf("ports %+v, want %+v", s.Ports, tt.ports)
			}
			if len(s.Conflicts) != len(tt.conflicts) {
				t.Errorf("conflicts %+v, want %v", s.Conflicts, tt.conflicts)
			}
			for cl, reasons := range tt.conflicts {
				c := s.Conflicts[cl]
				if c.Reason() != reasons {
					t.Errorf("cluster %s: reasons %q, want %q", cl, c.Reason(), reasons)
				}
				if !strings.Contains(c.Message, tt.msg) || !strings.Contains(c.Message, "cluster "+tt.winner+"'s export is the oldest") {
					t.Errorf("cluster %s: message %q lacks %q and the winner", cl, c.Message, tt.msg)
				}
			}
		})
	}
}

func equalPorts(a, b []catalog.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAllocate(t *testing.T) {
	p := netip.MustParsePrefix("10.9.0.0/30") // hosts .1 and .2
	used := map[netip.Addr]bool{}
	for _, want := range []string{"10.9.0.1", "10.9.0.2"} {
		a, err := allocate(p, used)
		if err != nil || a.String() != want {
			t.Fatalf("allocate = %v, %v; want %s", a, err, want)
		}
		used[a] = true
	}
	if _, err := allocate(p, used); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("allocate from a full range: %v, want exhausted", err)
	}
	delete(used, netip.MustParseAddr("10.9.0.1"))
	if a, _ := allocate(p, used); a.String() != "10.9.0.1" {
		t.Fatalf("a freed address is reused: got %v", a)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"bad cluster", func(c *Config) { c.Cluster = "A_1" }, "cluster:"},
		{"no rest", func(c *Config) { c.REST = nil }, "rest:"},
		{"no broker", func(c *Config) { c.Clusterset = nil }, "clusterset:"},
		{"bad range", func(c *Config) { c.ClustersetIPs = "10.0.0.0" }, "clusterset-ips:"},
		{"tiny range", func(c *Config) { c.ClustersetIPs = "10.0.0.0/32" }, "no host addresses"},
		{"bad wan", func(c *Config) { c.GatewayWAN = []string{"nohost"} }, "gateway-wan[0]"},
		{"bad gateway ip", func(c *Config) { c.GatewayIPs = []string{"1.2.3"} }, "gateway-ips[0]"},
		{"lease ns", func(c *Config) { c.LeaderElection = true }, "leader-election-namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	c := validConfig()
	c.Clusterset, c.SyncOnly = nil, true
	if err := c.Validate(); err != nil {
		t.Fatalf("sync-only needs no broker: %v", err)
	}
}
