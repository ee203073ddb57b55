package k8s

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/k8s/api"
	"github.com/strait-net/strait/k8s/k8stest"
)

// patience bounds waits for what must happen; a hang detector, never a
// performance threshold.
const patience = 30 * time.Second

// One API server for the package's tests: it takes seconds to start. The
// tests run one after another, each with its own namespaces and controller.
var (
	sharedOnce sync.Once
	shared     *k8stest.Cluster
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		_ = shared.Stop()
	}
	os.Exit(code)
}

func apiServer(t *testing.T) *k8stest.Cluster {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = k8stest.Start() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func validConfig() Config {
	return Config{Cluster: "a", REST: &rest.Config{Host: "https://127.0.0.1"}, Clusterset: NewHub().Member("a")}
}

// namespace creates a namespace for one test and, when the test ends,
// deletes what the test and the controller made in it (the API server
// runs no namespace controller that would).
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := testenv.UniqueName("t-")
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, o := range []client.Object{&mcs.ServiceExport{}, &mcs.ServiceImport{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Pod{}} {
			_ = c.DeleteAllOf(ctx, o, client.InNamespace(ns))
		}
	})
	return ns
}

// run starts a controller and stops it when t ends; stop stops it earlier
// and returns Run's error.
func run(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			_ = c.Close()
			_ = c.Close() // idempotent
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func service(ns, name string, mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	for _, m := range mod {
		m(s)
	}
	return s
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// condition waits for the export's condition to have status and reason,
// and returns it.
func condition(t *testing.T, c client.Client, ns, name string, typ mcs.ServiceExportConditionType, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, fmt.Sprintf("serviceexport %s/%s condition %s=%s/%s", ns, name, typ, status, reason), func() error {
		var se mcs.ServiceExport
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &se); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(se.Status.Conditions, string(typ))
		if cond == nil {
			return fmt.Errorf("no condition; have %+v", se.Status.Conditions)
		}
		if cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("have %s/%s: %s", cond.Status, cond.Reason, cond.Message)
		}
		got = *cond
		return nil
	})
	return got
}

// event waits for a Warning event on the object whose message holds want.
func event(t *testing.T, c client.Client, ns, name, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("event on %s/%s saying %q", ns, name, want), func() error {
		var evs corev1.EventList
		if err := c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Type == corev1.EventTypeWarning {
				if strings.Contains(e.Message, want) {
					return nil
				}
				seen = append(seen, e.Message)
			}
		}
		return fmt.Errorf("events: %q", seen)
	})
}

// published returns cluster's exports as the hub holds them.
func published(h *Hub, cluster string) []string {
	cat, _ := h.Member("observer").Catalog()
	var out []string
	if st := cat.Clusters[cluster]; st != nil {
		for _, e := range st.Exports {
			out = append(out, e.Key())
		}
	}
	return out
}

func TestExportConditions(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	hub := NewHub()
	run(t, Config{Cluster: "a", REST: k.Config, Clusterset: hub.Member("a")})

	t.Run("no such service", func(t *testing.T) {
		create(t, c, &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"}})
		cond := condition(t, c, ns, "ghost", mcs.ServiceExportConditionValid, metav1.ConditionFalse, "NoService")
		if !strings.Contains(cond.Message, "service "+ns+"/ghost does not exist") {
			t.Errorf("message %q does not say what is wrong", cond.Message)
		}
		condition(t, c, ns, "ghost", mcs.ServiceExportConditionReady, metav1.ConditionFalse, "Failed")
		event(t, c, ns, "ghost", "does not exist")
	})
	t.Run("ExternalName service", func(t *testing.T) {
		create(t, c, service(ns, "ext", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.Ports = corev1.ServiceTypeExternalName, "example.com", nil
		}), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"}})
		cond := condition(t, c, ns, "ext", mcs.ServiceExportConditionValid, metav1.ConditionFalse, "InvalidServiceType")
		if !strings.Contains(cond.Message, "ExternalName") {
			t.Errorf("message %q does not name the type", cond.Message)
		}
		event(t, c, ns, "ext", "ExternalName")
	})
	t.Run("valid", func(t *testing.T) {
		create(t, c, service(ns, "web"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}})
		condition(t, c, ns, "web", mcs.ServiceExportConditionValid, metav1.ConditionTrue, "Valid")
		condition(t, c, ns, "web", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")
		condition(t, c, ns, "web", mcs.ServiceExportConditionConflict, metav1.ConditionFalse, "NoConflicts")
		eventually(t, "published", func() error {
			if got := published(hub, "a"); !slices.Equal(got, []string{ns + "/web"}) {
				return fmt.Errorf("hub has %v", got)
			}
			return nil
		})
	})
	t.Run("service appears later", func(t *testing.T) {
		create(t, c, service(ns, "ghost"))
		condition(t, c, ns, "ghost", mcs.ServiceExportConditionValid, metav1.ConditionTrue, "Valid")
		condition(t, c, ns, "ghost", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")
	})
	t.Run("service deleted", func(t *testing.T) {
		if err := c.Delete(context.Background(), service(ns, "ghost")); err != nil {
			t.Fatal(err)
		}
		condition(t, c, ns, "ghost", mcs.ServiceExportConditionValid, metav1.ConditionFalse, "NoService")
		eventually(t, "unpublished", func() error {
			if got := published(hub, "a"); !slices.Equal(got, []string{ns + "/web"}) {
				return fmt.Errorf("hub has %v", got)
			}
			return nil
		})
	})
	t.Run("steady state writes nothing", func(t *testing.T) {
		var before mcs.ServiceExport
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &before); err != nil {
			t.Fatal(err)
		}
		// Another change makes the controller run a full pass; once its
		// effect is visible, the pass also went over "web".
		create(t, c, service(ns, "later"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}})
		condition(t, c, ns, "later", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")
		var after mcs.ServiceExport
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("an unchanged export was written again: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
		}
	})
}

// failingClusterset is a broker that is down.
type failingClusterset struct{ changed chan struct{} }

func (f failingClusterset) Publish(context.Context, broker.ClusterState) error {
	return errors.New("dial 192.0.2.1:4500: connection refused")
}
func (f failingClusterset) Catalog() (*broker.Catalog, bool) { return nil, false }
func (f failingClusterset) Changed() <-chan struct{}         { return f.changed }

func TestBrokerDown(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	run(t, Config{Cluster: "a", REST: k.Config, Clusterset: failingClusterset{make(chan struct{})}})
	create(t, c, service(ns, "web"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}})
	condition(t, c, ns, "web", mcs.ServiceExportConditionValid, metav1.ConditionTrue, "Valid")
	cond := condition(t, c, ns, "web", mcs.ServiceExportConditionReady, metav1.ConditionFalse, "Pending")
	if !strings.Contains(cond.Message, "connection refused") {
		t.Errorf("Ready message %q does not say why", cond.Message)
	}
}

// remote publishes exports of another cluster to the hub.
func remote(t *testing.T, h *Hub, cluster string, gateways []string, exports ...ClusterExport) {
	t.Helper()
	st := broker.ClusterState{}
	for _, g := range gateways {
		st.Gateways = append(st.Gateways, broker.Gateway{Addr: g, Healthy: true})
	}
	for _, e := range exports {
		e.Cluster = cluster
		st.Exports = append(st.Exports, brokerExport(e))
	}
	if err := h.Member(cluster).Publish(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

func TestConflicts(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	hub := NewHub()
	run(t, Config{Cluster: "a", REST: k.Config, Clusterset: hub.Member("a")})
	create(t, c,
		service(ns, "ports"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ports"}},
		service(ns, "kind"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kind"}},
		service(ns, "young"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "young"}})
	long := time.Now().Add(-time.Hour)
	remote(t, hub, "b", []string{"192.0.2.2:4443"},
		// Older than a's: b wins; a's port 80 named http clashes.
		ClusterExport{Namespace: ns, Name: "ports", Type: mcs.ClusterSetIP, Created: long,
			Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 8080}}},
		ClusterExport{Namespace: ns, Name: "kind", Type: mcs.Headless, Created: long,
			Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 80}}},
		// Newer than a's: a wins, no conflict on a.
		ClusterExport{Namespace: ns, Name: "young", Type: mcs.Headless, Created: time.Now().Add(time.Hour),
			Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 80}}})

	cond := condition(t, c, ns, "ports", mcs.ServiceExportConditionConflict, metav1.ConditionTrue, "PortConflict")
	for _, want := range []string{`port "http" is TCP/80, clusterset uses TCP/8080`, "cluster b's export is the oldest"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("conflict message %q lacks %q", cond.Message, want)
		}
	}
	event(t, c, ns, "ports", "PortConflict")
	cond = condition(t, c, ns, "kind", mcs.ServiceExportConditionConflict, metav1.ConditionTrue, "TypeConflict")
	if !strings.Contains(cond.Message, "clusterset uses Headless") {
		t.Errorf("conflict message %q does not name the type", cond.Message)
	}
	condition(t, c, ns, "young", mcs.ServiceExportConditionConflict, metav1.ConditionFalse, "NoConflicts")
	// A conflict does not stop the export (MCS: the oldest's properties
	// are used, every exporter stays a backend).
	condition(t, c, ns, "ports", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")

	// The imports use the winner's properties: b's port for "ports",
	// Headless (no IP) for "kind", a's for "young".
	si := serviceImport(t, c, ns, "ports", "a", "b")
	if len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 8080 {
		t.Errorf("ports import: %+v, want b's port 8080 only", si.Spec.Ports)
	}
	si = serviceImport(t, c, ns, "kind", "a", "b")
	if si.Spec.Type != mcs.Headless || len(si.Spec.IPs) != 0 {
		t.Errorf("kind import: type %s ips %v, want Headless without IPs", si.Spec.Type, si.Spec.IPs)
	}
	si = serviceImport(t, c, ns, "young", "a", "b")
	if si.Spec.Type != mcs.ClusterSetIP || len(si.Spec.IPs) != 1 {
		t.Errorf("young import: type %s ips %v, want a's ClusterSetIP with an IP", si.Spec.Type, si.Spec.IPs)
	}

	// The conflict ends when b withdraws.
	remote(t, hub, "b", []string{"192.0.2.2:4443"})
	condition(t, c, ns, "ports", mcs.ServiceExportConditionConflict, metav1.ConditionFalse, "NoConflicts")
}

// serviceImport waits for the import to exist with status.clusters equal
// to clusters, and returns it.
func serviceImport(t *testing.T, c client.Client, ns, name string, clusters ...string) *mcs.ServiceImport {
	t.Helper()
	var si mcs.ServiceImport
	eventually(t, fmt.Sprintf("serviceimport %s/%s from %v", ns, name, clusters), func() error {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si); err != nil {
			return err
		}
		var got []string
		for _, cs := range si.Status.Clusters {
			got = append(got, cs.Cluster)
		}
		if !slices.Equal(got, clusters) {
			return fmt.Errorf("status.clusters %v", got)
		}
		return nil
	})
	return &si
}

func TestImports(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	hub := NewHub()
	cfg := Config{Cluster: "a", REST: k.Config, Clusterset: hub.Member("a"), ClustersetIPs: "10.77.0.0/24",
		GatewayIPs: []string{"10.1.0.7", "10.1.0.8"}, GatewayWAN: []string{"192.0.2.1:4443"}}
	stop := run(t, cfg)
	t0 := time.Now().Add(-time.Minute)
	http := catalog.ServicePort{Name: "http", Protocol: catalog.TCP, Port: 80}
	metrics := catalog.ServicePort{Name: "metrics", Protocol: catalog.TCP, Port: 9090}
	remote(t, hub, "b", []string{"192.0.2.2:4443"}, ClusterExport{Namespace: ns, Name: "echo", Type: mcs.ClusterSetIP, Created: t0, Ports: []catalog.ServicePort{http}})
	remote(t, hub, "c", []string{"192.0.2.3:4443", "192.0.2.4:4443"}, ClusterExport{Namespace: ns, Name: "echo", Type: mcs.ClusterSetIP, Created: t0.Add(time.Second), Ports: []catalog.ServicePort{http, metrics}})
	// The namespace of this export does not exist here: no import, and
	// the others are not held up.
	remote(t, hub, "d", nil, ClusterExport{Namespace: "nowhere-" + ns, Name: "x", Type: mcs.ClusterSetIP, Created: t0, Ports: []catalog.ServicePort{http}})

	si := serviceImport(t, c, ns, "echo", "b", "c")
	if si.Spec.Type != mcs.ClusterSetIP || len(si.Spec.Ports) != 2 || si.Spec.Ports[0].Name != "http" || si.Spec.Ports[1].Port != 9090 {
		t.Errorf("import spec %+v: want ClusterSetIP with the merged ports http/80 and metrics/9090", si.Spec)
	}
	if len(si.Spec.IPs) != 1 || !netip.MustParsePrefix("10.77.0.0/24").Contains(netip.MustParseAddr(si.Spec.IPs[0])) {
		t.Fatalf("import ips %v: want one address of 10.77.0.0/24", si.Spec.IPs)
	}
	ip := si.Spec.IPs[0]

	checkSlices := func(t *testing.T, ports int, clusters ...string) {
		t.Helper()
		eventually(t, "endpointslices of "+strings.Join(clusters, ","), func() error {
			var list discoveryv1.EndpointSliceList
			if err := c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{mcs.LabelServiceName: "echo"}); err != nil {
				return err
			}
			var got []string
			for _, es := range list.Items {
				got = append(got, es.Labels[mcs.LabelSourceCluster])
				if es.Labels[api.ManagedByLabel] != api.ManagedBy {
					return fmt.Errorf("slice %s lacks the managed-by label", es.Name)
				}
				if len(es.OwnerReferences) != 1 || es.OwnerReferences[0].Kind != "ServiceImport" || es.OwnerReferences[0].UID != si.UID {
					return fmt.Errorf("slice %s owners %+v: want the ServiceImport", es.Name, es.OwnerReferences)
				}
				var addrs []string
				for _, ep := range es.Endpoints {
					addrs = append(addrs, ep.Addresses...)
				}
				if !slices.Equal(addrs, cfg.GatewayIPs) {
					return fmt.Errorf("slice %s endpoints %v: want the gateways %v", es.Name, addrs, cfg.GatewayIPs)
				}
				if len(es.Ports) != ports {
					return fmt.Errorf("slice %s ports %d, want %d", es.Name, len(es.Ports), ports)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, clusters) {
				return fmt.Errorf("slices of clusters %v", got)
			}
			return nil
		})
	}
	checkSlices(t, 2, "b", "c")

	peers := func(t *testing.T, want map[string][]string) {
		t.Helper()
		eventually(t, fmt.Sprint("peers ", want), func() error {
			var list api.PeerList
			if err := c.List(context.Background(), &list); err != nil {
				return err
			}
			got := map[string][]string{}
			for _, p := range list.Items {
				got[p.Name] = p.Spec.Gateways
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("peers %v", got)
			}
			return nil
		})
	}
	peers(t, map[string][]string{"b": {"192.0.2.2:4443"}, "c": {"192.0.2.3:4443", "192.0.2.4:4443"}})

	// A restart changes nothing that was right: same IP, no writes.
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after ctx ended, want nil", err)
	}
	var slicesBefore discoveryv1.EndpointSliceList
	_ = c.List(context.Background(), &slicesBefore, client.InNamespace(ns))
	stop = run(t, cfg)
	// A new remote export makes a pass that has gone over everything.
	remote(t, hub, "d", nil, ClusterExport{Namespace: ns, Name: "marker", Type: mcs.ClusterSetIP, Created: t0, Ports: []catalog.ServicePort{http}})
	serviceImport(t, c, ns, "marker", "d")
	var again mcs.ServiceImport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "echo"}, &again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != si.ResourceVersion || again.Spec.IPs[0] != ip {
		t.Errorf("restart rewrote the import: resourceVersion %s → %s, ips %v → %v", si.ResourceVersion, again.ResourceVersion, ip, again.Spec.IPs)
	}
	var slicesAfter discoveryv1.EndpointSliceList
	_ = c.List(context.Background(), &slicesAfter, client.InNamespace(ns), client.MatchingLabels{mcs.LabelServiceName: "echo"})
	for _, a := range slicesAfter.Items {
		for _, b := range slicesBefore.Items {
			if a.Name == b.Name && a.ResourceVersion != b.ResourceVersion {
				t.Errorf("restart rewrote endpointslice %s", a.Name)
			}
		}
	}
	// marker got the next address, not echo's.
	if m := serviceImport(t, c, ns, "marker", "d"); m.Spec.IPs[0] == ip {
		t.Errorf("two imports share the clusterset IP %s", ip)
	}

	// An operator sets c's data plane on its Peer (docs/packet.md, "The
	// gateway"): the controller's later passes keep it.
	var pc api.Peer
	if err := c.Get(context.Background(), types.NamespacedName{Name: "c"}, &pc); err != nil {
		t.Fatal(err)
	}
	pc.Spec.DataPlane = catalog.DataPlanePacket
	if err := c.Update(context.Background(), &pc); err != nil {
		t.Fatal(err)
	}

	// c withdraws: its slice goes, the import stays with b, same IP.
	remote(t, hub, "c", []string{"192.0.2.3:4443", "192.0.2.4:4443"})
	si = serviceImport(t, c, ns, "echo", "b")
	if si.Spec.IPs[0] != ip || len(si.Spec.Ports) != 1 {
		t.Errorf("after c withdrew: ips %v (want %s), ports %+v (want http only)", si.Spec.IPs, ip, si.Spec.Ports)
	}
	checkSlices(t, 1, "b")
	if err := c.Get(context.Background(), types.NamespacedName{Name: "c"}, &pc); err != nil || pc.Spec.DataPlane != catalog.DataPlanePacket {
		t.Errorf("peer c after the controller's passes: %v, spec %+v; want its dataPlane packet kept", err, pc.Spec)
	}

	// b leaves the clusterset: the import, its slices and b's Peer go.
	hub.Remove("b")
	eventually(t, "import deleted", func() error {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "echo"}, &mcs.ServiceImport{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	checkSlices(t, 0)
	peers(t, map[string][]string{"c": {"192.0.2.3:4443", "192.0.2.4:4443"}})
	hub.Remove("c")
	hub.Remove("d")
	peers(t, map[string][]string{})
}

// A local export of a service others import too: the import lists this
// cluster in status.clusters but gets no slice (and no gateway route) for it.
func TestImportIncludesLocalExport(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	hub := NewHub()
	run(t, Config{Cluster: "a", REST: k.Config, Clusterset: hub.Member("a"), GatewayIPs: []string{"10.1.0.7"}})
	create(t, c, service(ns, "echo"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}})
	condition(t, c, ns, "echo", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")
	remote(t, hub, "b", []string{"192.0.2.2:4443"}, ClusterExport{Namespace: ns, Name: "echo", Type: mcs.ClusterSetIP,
		Created: time.Now().Add(time.Hour), Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 80}}})
	serviceImport(t, c, ns, "echo", "a", "b")
	eventually(t, "one slice, for b", func() error {
		var list discoveryv1.EndpointSliceList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Labels[mcs.LabelSourceCluster] != "b" {
			return fmt.Errorf("%d slices", len(list.Items))
		}
		return nil
	})
	// Deleting the export withdraws it from the clusterset.
	if err := c.Delete(context.Background(), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}}); err != nil {
		t.Fatal(err)
	}
	serviceImport(t, c, ns, "echo", "b")
	if got := published(hub, "a"); len(got) != 0 {
		t.Errorf("hub still has a's exports %v", got)
	}
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// A ServiceImport strait did not create is left alone, with an event
// saying so, and the other imports go on.
func TestForeignImportLeftAlone(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	hub := NewHub()
	run(t, Config{Cluster: "a", REST: k.Config, Clusterset: hub.Member("a")})
	mine := &mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"},
		Spec: mcs.ServiceImportSpec{Type: mcs.ClusterSetIP, IPs: []string{"10.99.0.1"}, Ports: []mcs.ServicePort{{Port: 1}}}}
	create(t, c, mine)
	http := []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 80}}
	remote(t, hub, "b", []string{"192.0.2.2:4443"},
		ClusterExport{Namespace: ns, Name: "mine", Type: mcs.ClusterSetIP, Created: time.Now(), Ports: http},
		ClusterExport{Namespace: ns, Name: "other", Type: mcs.ClusterSetIP, Created: time.Now(), Ports: http})
	serviceImport(t, c, ns, "other", "b")
	event(t, c, ns, "mine", "not created by strait")
	var got mcs.ServiceImport
	if err := c.Get(context.Background(), keyOf(ns, "mine"), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != mine.ResourceVersion || len(got.Labels) != 0 {
		t.Errorf("the foreign import was changed: resourceVersion %s → %s, labels %v", mine.ResourceVersion, got.ResourceVersion, got.Labels)
	}
	// Its removal from the clusterset does not delete it either.
	hub.Remove("b")
	eventually(t, "other removed", func() error {
		if err := c.Get(context.Background(), keyOf(ns, "other"), &mcs.ServiceImport{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if err := c.Get(context.Background(), keyOf(ns, "mine"), &got); err != nil {
		t.Errorf("the foreign import was deleted: %v", err)
	}
}
