package k8s

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/k8s/k8stest"
)

// render runs kubectl kustomize on dir and returns the objects.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(k8stest.Kubectl(t), "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode kustomize output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func TestDeployRenders(t *testing.T) {
	objs := render(t, filepath.Join(k8stest.Root(), "deploy"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() != "CustomResourceDefinition" && o.GetKind() != "Namespace" &&
			!strings.HasPrefix(o.GetKind(), "Cluster") && o.GetNamespace() != "strait-system" {
			t.Errorf("%s %s is in namespace %q, want strait-system", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	for kind, n := range map[string]int{"Namespace": 1, "CustomResourceDefinition": 4, "ClusterRole": 2, "Deployment": 2,
		"PodDisruptionBudget": 1, "ConfigMap": 2, "Service": 1} {
		if kinds[kind] != n {
			t.Errorf("%d objects of kind %s, want %d", kinds[kind], kind, n)
		}
	}
	dns := render(t, filepath.Join(k8stest.Root(), "deploy", "dns"))
	if len(dns) != 1 || !strings.Contains(dns[0].Object["data"].(map[string]any)["clusterset.server"].(string), "clusterset.local:53") {
		t.Errorf("deploy/dns renders %d objects, want the coredns-custom ConfigMap with a clusterset.local server block", len(dns))
	}
}

// TestRBACSufficient installs deploy/'s RBAC on a real API server and runs
// the controller as its ServiceAccount (a client certificate with the
// ServiceAccount's user name: RBAC matches by name), the gateway sidecar
// as the gateway's, and a user without bindings, which must be refused
// with the missing permissions named.
func TestRBACSufficient(t *testing.T) {
	k := apiServer(t)
	ctx := context.Background()
	for _, o := range render(t, filepath.Join(k8stest.Root(), "deploy")) {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := k.Client.Create(ctx, o); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	sa := func(name string) string { return "system:serviceaccount:strait-system:" + name }
	ctrlCfg, err := k.User(sa("strait-controller"), "system:serviceaccounts", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	gwCfg, err := k.User(sa("strait-gateway"), "system:serviceaccounts", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := k.User("nobody", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("controller", func(t *testing.T) {
		ns := namespace(t, k.Client)
		hub := NewHub()
		run(t, Config{Cluster: "a", REST: ctrlCfg, Clusterset: hub.Member("a"), GatewayIPs: []string{"10.1.0.7"},
			LeaderElection: true, LeaderElectionNamespace: "strait-system"})
		create(t, k.Client, service(ns, "web"), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}},
			&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"}})
		condition(t, k.Client, ns, "web", mcs.ServiceExportConditionReady, metav1.ConditionTrue, "Exported")
		event(t, k.Client, ns, "ghost", "does not exist") // events allowed
		remote(t, hub, "b", []string{"192.0.2.2:4443"}, ClusterExport{Namespace: ns, Name: "echo", Type: mcs.ClusterSetIP,
			Created: time.Now(), Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 80}}})
		serviceImport(t, k.Client, ns, "echo", "b")
		hub.Remove("b")
		eventually(t, "import removed", func() error {
			if serviceImportExists(k, ns, "echo") {
				return errors.New("still there")
			}
			return nil
		})
	})
	t.Run("gateway sidecar", func(t *testing.T) {
		c, err := New(Config{Cluster: "a", REST: gwCfg, SyncOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		// Only the permission check: the sidecar's pushes need a gateway.
		if err := checkAccess(ctx, gwCfg, true, true, false, ""); err != nil {
			t.Fatalf("sidecar permissions: %v", err)
		}
		if err := checkAccess(ctx, gwCfg, false, true, false, ""); err == nil || !strings.Contains(err.Error(), "create serviceimports") {
			t.Fatalf("the sidecar's role must not allow writes; check said %v", err)
		}
		_ = c.Close()
	})
	t.Run("denied", func(t *testing.T) {
		c, err := New(Config{Cluster: "a", REST: nobody, Clusterset: NewHub().Member("a")})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, patience)
		defer cancel()
		err = c.Run(rctx) // returns at once: no hanging informers
		for _, want := range []string{"rbac:", "list serviceexports.multicluster.x-k8s.io", "update serviceimports.multicluster.x-k8s.io/status", "deploy/rbac.yaml"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Run without permissions = %v, want an error naming %q", err, want)
			}
		}
	})
}

func serviceImportExists(k *k8stest.Cluster, ns, name string) bool {
	var si mcs.ServiceImport
	return k.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si) == nil
}
