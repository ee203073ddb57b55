package k8s

import (
	"context"
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
	err := k.Client.Create(context.Background(), &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "empty"}})
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
		service(ns, "lonely", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely"}},
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"}},
		&mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "remote"},
			Spec: mcs.ServiceImportSpec{Type: mcs.ClusterSetIP, IPs: []string{"10.77.1.5"}, Ports: []mcs.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}},
		&mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "headless"},
			Spec: mcs.ServiceImportSpec{Type: mcs.Headless, Ports: []mcs.ServicePort{{Port: 80}}}},
		&api.Peer{ObjectMeta: metav1.ObjectMeta{Name: "p-" + ns}, Spec: catalog.PeerSpec{Gateways: []string{"192.0.2.9:4443"}}},
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
	var si mcs.ServiceImport
	if err := c.Get(ctx, keyOf(ns, "remote"), &si); err != nil {
		t.Fatal(err)
	}
	si.Status.Clusters = []mcs.ClusterStatus{{Cluster: "a"}, {Cluster: "b"}}
	if err := c.Status().Update(ctx, &si); err != nil {
		t.Fatal(err)
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
	if e := export("web"); e == nil || e.Spec.Target != "10.0.0.91:80" || len(e.Spec.Ports) != 1 {
		t.Errorf("web: %+v, want target the cluster IP 10.0.0.91:80", e)
	}
	if e := export("db"); e == nil || e.Spec.Target != "10.1.2.4:8080" {
		t.Errorf("db: %+v, want the headless service's first ready endpoint 10.1.2.4:8080", e)
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
	if got[catalog.Key{Kind: catalog.KindPeer, Name: "bad-" + ns}] != nil {
		t.Error("a peer the gateway would refuse must be left out")
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{"lonely: headless service has no ready endpoint", "Peer bad-" + ns} {
		if !strings.Contains(all, want) {
			t.Errorf("problems %q lack %q", all, want)
		}
	}
}
