package k8s

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/k8s/api"
)

// TestCRDValidation: the API server enforces what catalog's validation
// does, with the field named, because the CRDs carry catalog's enums and
// bounds.
func TestCRDValidation(t *testing.T) {
	k := apiServer(t)
	for _, tt := range []struct {
		obj  *api.AccessPolicy
		want string
	}{
		{&api.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "too-low"}, Spec: catalog.AccessPolicySpec{Priority: 5000, Action: catalog.Allow}}, "spec.priority"},
		{&api.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "maybe"}, Spec: catalog.AccessPolicySpec{Priority: 1, Action: "maybe"}}, "spec.action"},
	} {
		err := k.Client.Create(context.Background(), tt.obj)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("create %s: %v, want a rejection naming %s", tt.obj.Name, err, tt.want)
		}
	}
	err := k.Client.Create(context.Background(), &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "kernel"},
		Spec: catalog.PeerSpec{Gateways: []string{"192.0.2.9:4443"}, DataPlane: "kernel"}})
	if err == nil || !strings.Contains(err.Error(), "spec.dataPlane") {
		t.Errorf("create a peer with dataPlane kernel: %v, want a rejection naming spec.dataPlane", err)
	}
	err = k.Client.Create(context.Background(), &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "empty"}})
	if err == nil || !strings.Contains(err.Error(), "spec.gateways") {
		t.Errorf("create a peer without gateways: %v, want a rejection naming spec.gateways", err)
	}
}

// TestGatewayResources checks the configuration derived for the gateways
// from the cluster's objects (the push itself runs in the e2e test).
func TestGatewayResources(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	ctx := context.Background()
	create(t, c,
		service(ns, "web", func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.91" }),
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}},
		service(ns, "db", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}},
				{Addresses: []string{"10.1.2.4"}},
			},
			Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}}},
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}},
		// Two-port services: each port gets its own target.
		service(ns, "multi", func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.0.0.92"
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090})
		}),
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "multi"}},
		// DNS: UDP and TCP on one number, each carried with its protocol.
		service(ns, "dns", func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.0.0.93"
			s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53}}
		}),
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dns"}},
		service(ns, "hmulti", func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 9000},
				corev1.ServicePort{Name: "debug", Protocol: corev1.ProtocolTCP, Port: 7000})
		}),
		// The ports in two slices, each with its own pod; "debug" in none.
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hmulti-1", Labels: map[string]string{discoveryv1.LabelServiceName: "hmulti"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.3.5"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("admin"), Port: ptr(int32(9001))}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hmulti-2", Labels: map[string]string{discoveryv1.LabelServiceName: "hmulti"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.3.6"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}}},
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hmulti"}},
		service(ns, "lonely", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely"}},
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"}},
		&mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "remote"},
			Spec: mcs.ServiceImportSpec{Type: mcs.ClusterSetIP, IPs: []string{"10.77.1.5"}, Ports: []mcs.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}},
		&mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "remote-dns"},
			Spec: mcs.ServiceImportSpec{Type: mcs.ClusterSetIP, IPs: []string{"10.77.1.6"}, Ports: []mcs.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}}},
		&mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "headless"},
			Spec: mcs.ServiceImportSpec{Type: mcs.Headless, Ports: []mcs.ServicePort{{Port: 80}}}},
		&api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "p-" + ns}, Spec: catalog.PeerSpec{Gateways: []string{"192.0.2.9:4443"}, DataPlane: catalog.DataPlanePacket}},
		&api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + ns}, Spec: catalog.PeerSpec{Gateways: []string{"no-port"}}},
		&api.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-" + ns}, Spec: catalog.AccessPolicySpec{Priority: 10, Action: catalog.Allow,
			To: catalog.Target{Namespaces: []string{ns}}}},
	)
	t.Cleanup(func() {
		_ = c.Delete(ctx, &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "p-" + ns}})
		_ = c.Delete(ctx, &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + ns}})
		_ = c.Delete(ctx, &api.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-" + ns}})
	})
	// The import's status, as the writer would set it: from b and a (this
	// cluster, which the gateway must not dial).
	for _, name := range []string{"remote", "remote-dns"} {
		var si mcs.ServiceImport
		if err := c.Get(ctx, keyOf(ns, name), &si); err != nil {
			t.Fatal(err)
		}
		si.Status.Clusters = []mcs.ClusterStatus{{Cluster: "a"}, {Cluster: "b"}}
		if err := c.Status().Update(ctx, &si); err != nil {
			t.Fatal(err)
		}
	}

	ctrl, err := New(Config{Cluster: "a", REST: k.Config, SyncOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// GatewayResources reads through the manager's cache; this test reads
	// the API server directly instead, with the same code.
	ctrl.client = c
	rs, problems, err := ctrl.GatewayResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[catalog.Key]catalog.Resource{}
	for _, r := range rs {
		got[r.Key()] = r
	}
	export := func(name string) *catalog.ServiceExport {
		r, _ := got[catalog.Key{Kind: catalog.KindServiceExport, Namespace: ns, Name: name}].(*catalog.ServiceExport)
		return r
	}
	// targets returns the export's port → target, as the gateway picks them.
	targets := func(e *catalog.ServiceExport) map[int32]string {
		if e == nil {
			return nil
		}
		out := map[int32]string{}
		for _, p := range e.Spec.Ports {
			out[p.Port], _ = e.TargetFor(p.Port)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		want map[int32]string
		why  string
	}{
		{"web", map[int32]string{80: "10.0.0.91:80"}, "the cluster IP and port"},
		{"db", map[int32]string{80: "10.1.2.4:8080"}, "the headless service's first ready endpoint"},
		{"multi", map[int32]string{80: "10.0.0.92:80", 9090: "10.0.0.92:9090"}, "the cluster IP and each port"},
		{"hmulti", map[int32]string{80: "10.1.3.6:8080", 9000: "10.1.3.5:9001"}, "per port, the ready endpoint of the slice port of the same name; debug, without one, left out"},
	} {
		if got := targets(export(tt.name)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: targets %v, want %v: %s", tt.name, got, tt.want, tt.why)
		}
	}
	// The UDP port reaches the gateway as UDP, with its own target; the
	// TCP port of the same number stays TCP.
	if e := export("dns"); e == nil {
		t.Error("dns: not exported")
	} else {
		udp, uerr := e.TargetForProtocol(catalog.UDP, 53)
		tcp, terr := e.TargetForProtocol(catalog.TCP, 53)
		if uerr != nil || udp != "10.0.0.93:53" || terr != nil || tcp != "10.0.0.93:53" || e.Spec.Ports[0].Protocol != catalog.UDP {
			t.Errorf("dns: ports %+v: UDP 53 → %q (%v), TCP 53 → %q (%v); want both to the cluster IP with their protocols", e.Spec.Ports, udp, uerr, tcp, terr)
		}
	}
	if imp, _ := got[catalog.Key{Kind: catalog.KindServiceImport, Namespace: ns, Name: "remote-dns"}].(*catalog.ServiceImport); imp == nil || len(imp.Spec.Ports) != 1 || imp.Spec.Ports[0].Protocol != catalog.UDP {
		t.Errorf("remote-dns import: %+v, want its port as UDP", imp)
	}
	if export("lonely") != nil || export("ghost") != nil {
		t.Error("exports without a target (no endpoint, no service) must be left out")
	}
	imp, _ := got[catalog.Key{Kind: catalog.KindServiceImport, Namespace: ns, Name: "remote"}].(*catalog.ServiceImport)
	if imp == nil || strings.Join(imp.SourceClusters(), ",") != "b" || imp.Spec.IPs[0] != "10.77.1.5" {
		t.Errorf("remote import: %+v, want 10.77.1.5 from cluster b only", imp)
	}
	if got[catalog.Key{Kind: catalog.KindServiceImport, Namespace: ns, Name: "headless"}] != nil {
		t.Error("a headless import has no clusterset IP to listen on: must be left out")
	}
	if got[catalog.Key{Kind: catalog.KindPeer, Name: "p-" + ns}] == nil || got[catalog.Key{Kind: catalog.KindAccessPolicy, Name: "allow-" + ns}] == nil {
		t.Error("peers and policies must be passed on")
	}
	if p, _ := got[catalog.Key{Kind: catalog.KindPeer, Name: "p-" + ns}].(*catalog.Peer); p == nil || p.Spec.DataPlane != catalog.DataPlanePacket {
		t.Errorf("peer p-%s: %+v, want its spec.dataPlane packet passed on", ns, p)
	}
	if got[catalog.Key{Kind: catalog.KindPeer, Name: "bad-" + ns}] != nil {
		t.Error("a peer the gateway would refuse must be left out")
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{"lonely: headless service has no ready endpoint", `hmulti: headless service has no ready endpoint for port "debug"`, "Peer bad-" + ns} {
		if !strings.Contains(all, want) {
			t.Errorf("problems %q lack %q", all, want)
		}
	}
}
