package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/k8s/k8stest"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/linkemu"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/tool"
)

// checkWith runs the preflight of a run from a/server to b/client with
// clusters as the file gives them.
func checkWith(t *testing.T, clusters string, dir string, tools []string, scenarios ...string) error {
	t.Helper()
	return checkEmu(t, clusters, dir, nil, tools, scenarios...)
}

// checkEmu is checkWith with an Emulator (nil refuses impaired scenarios).
func checkEmu(t *testing.T, clusters string, dir string, e Emulator, tools []string, scenarios ...string) error {
	t.Helper()
	m, err := ParseClusterMap([]byte(clusters), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Clusters: m, Emulator: e})
	if err != nil {
		t.Fatal(err)
	}
	var scs []scenario.Scenario
	for _, name := range scenarios {
		sc, err := scenario.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, sc)
	}
	return b.Check(context.Background(), run.BackendPlan{Server: "a/server", Client: "b/client", Scenarios: scs, Tools: tools,
		Services: []run.BackendService{{Service: tool.Service{Name: "echo", Port: 8080}, Args: []string{"app", "echo"}}}})
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}

// TestPreflight runs the checks a run makes before it creates anything
// against a real API server (no kubelets: the test writes the nodes'
// status as a kubelet would). The subtests run in order: they share the
// server's nodes.
func TestPreflight(t *testing.T) {
	c := k8stest.APIServer(t)
	dir := t.TempDir()
	if _, err := c.Kubeconfig("admin", []string{"system:masters"}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubeconfig("nobody", nil, dir); err != nil {
		t.Fatal(err)
	}
	admin := "clusters: {a: {kubeconfig: admin.kubeconfig}, b: {kubeconfig: admin.kubeconfig}}\n"
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("Unreachable", func(t *testing.T) {
		addr := testenv.FreeAddr(t)
		kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://%s\", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", addr)
		if err := os.WriteFile(filepath.Join(dir, "gone.kubeconfig"), []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		err := checkWith(t, "clusters: {a: {kubeconfig: admin.kubeconfig}, b: {kubeconfig: gone.kubeconfig}}\n", dir, []string{"direct"}, "lcl")
		wantErr(t, err, "cluster b: API server https://"+addr+" unreachable")
	})
	t.Run("RBAC", func(t *testing.T) {
		err := checkWith(t, "clusters: {a: {kubeconfig: nobody.kubeconfig}, b: {kubeconfig: admin.kubeconfig}}\n", dir, []string{"direct"}, "lcl")
		wantErr(t, err, "cluster a: RBAC: the kubeconfig's user may not create namespaces (cluster-wide)")
		wantErr(t, err, "create deployments.apps (in namespaces strait-lab-*)")
		// An impaired scenario: each side's pods are asked which source
		// address the other's have (an exec in the server's cluster, a
		// NodePort Service in the client's).
		err = checkEmu(t, "clusters: {a: {kubeconfig: nobody.kubeconfig}, b: {kubeconfig: admin.kubeconfig}}\n", dir, refusingEmulator{}, []string{"direct"}, "edg10")
		wantErr(t, err, "create pods/exec (in namespaces strait-lab-*)")
	})
	t.Run("NoNodes", func(t *testing.T) {
		wantErr(t, checkWith(t, admin, dir, []string{"direct"}, "lcl"), "cluster a: no ready, schedulable Linux node to run the workloads on (nodes: )")
	})
	node := func(t *testing.T, name, os string) {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: os, KernelVersion: "k-" + name, Architecture: "amd64"}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("WindowsOnly", func(t *testing.T) {
		node(t, "w1", "windows")
		wantErr(t, checkWith(t, admin, dir, []string{"direct"}, "lcl"), `cluster a: no ready, schedulable Linux node to run the workloads on (nodes: w1 (os "windows", ready true))`)
	})
	t.Run("Linux", func(t *testing.T) {
		node(t, "l1", "linux")
		m, err := ParseClusterMap([]byte(admin), dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Options{Clusters: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Check(ctx, run.BackendPlan{Server: "a/server", Client: "b/client", Scenarios: []scenario.Scenario{{Name: "lcl"}}, Tools: []string{"direct"}}); err != nil {
			t.Fatal(err)
		}
		md := b.Metadata().(Metadata)
		if a := md.Clusters["a"]; a == nil || a.Version == "" || len(a.Nodes) != 2 || a.CNI == "" {
			t.Errorf("metadata of a: %+v", a)
		}
	})
	t.Run("RBACClientEmulated", func(t *testing.T) {
		// a passes (it has a Linux node now): b's denials are listed.
		err := checkEmu(t, "clusters: {a: {kubeconfig: admin.kubeconfig}, b: {kubeconfig: nobody.kubeconfig}}\n", dir, refusingEmulator{}, []string{"direct"}, "edg10")
		wantErr(t, err, "cluster b: RBAC")
		wantErr(t, err, "create services (in namespaces strait-lab-*); get nodes (cluster-wide)")
		err = checkEmu(t, "clusters: {a: {kubeconfig: admin.kubeconfig}, b: {kubeconfig: nobody.kubeconfig}}\n", dir, refusingEmulator{}, []string{"direct"}, "lcl")
		if err == nil || strings.Contains(err.Error(), "create services") {
			t.Errorf("unimpaired: %v, want no services asked of the client's cluster", err)
		}
	})
	// A user who may do everything an unimpaired unit with direct does,
	// and nothing in kube-system: an impaired scenario is refused before
	// any unit, naming what link emulation needs there.
	if _, err := c.Kubeconfig("unit", nil, dir); err != nil {
		t.Fatal(err)
	}
	unit := "clusters: {a: {kubeconfig: unit.kubeconfig}, b: {kubeconfig: unit.kubeconfig}}\n"
	grant := func(t *testing.T, name, ns string, rules []rbacv1.PolicyRule) {
		t.Helper()
		subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "unit"}}
		var err error
		if ns == "" {
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}, metav1.CreateOptions{})
			}
		} else {
			_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, metav1.CreateOptions{})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("RBACEmulation", func(t *testing.T) {
		grant(t, "strait-lab-unit", "", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "nodes", "pods", "pods/log", "pods/exec", "services"}, Verbs: []string{"get", "list", "create", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}},
		})
		if err := checkEmu(t, unit, dir, refusingEmulator{}, []string{"direct"}, "lcl"); err != nil {
			t.Fatalf("unimpaired: %v, want no emulation rights asked", err)
		}
		err := checkEmu(t, unit, dir, refusingEmulator{}, []string{"direct"}, "lcl", "edg10")
		wantErr(t, err, "cluster a: RBAC: the kubeconfig's user may not create daemonsets.apps (in namespace kube-system, for link emulation); "+
			"get daemonsets.apps (in namespace kube-system, for link emulation); list daemonsets.apps (in namespace kube-system, for link emulation); "+
			"delete daemonsets.apps (in namespace kube-system, for link emulation); list events (in namespace kube-system, for link emulation)")
		if strings.Contains(err.Error(), "strait-lab-*") || strings.Contains(err.Error(), "list pods") {
			t.Errorf("%v: names rights the user has", err)
		}
		// What linkemu lists is all the preflight asks in kube-system.
		var rules []rbacv1.PolicyRule
		for _, r := range linkemu.Rights {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{r.Group}, Resources: []string{r.Resource}, Verbs: []string{r.Verb}})
		}
		grant(t, "strait-lab-linkemu", linkemu.Namespace, rules)
		if err := checkEmu(t, unit, dir, refusingEmulator{}, []string{"direct"}, "edg10"); err != nil {
			t.Fatalf("with linkemu.Rights in %s: %v", linkemu.Namespace, err)
		}
	})
	t.Run("PodSecurityEmulation", func(t *testing.T) {
		label := func(v string) {
			t.Helper()
			patch := `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":` + v + `}}}`
			if _, err := cs.CoreV1().Namespaces().Patch(ctx, "kube-system", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		defer label("null")
		label(`"baseline"`)
		wantErr(t, checkEmu(t, admin, dir, refusingEmulator{}, []string{"direct"}, "edg10"),
			`cluster a: link emulation: namespace kube-system enforces PodSecurity "baseline" (label pod-security.kubernetes.io/enforce), which refuses the privileged hostNetwork DaemonSet pods of link emulation (strait-linkemu-*) (it needs "privileged")`)
		if err := checkEmu(t, admin, dir, refusingEmulator{}, []string{"direct"}, "lcl"); err != nil {
			t.Errorf("unimpaired: %v, want kube-system's PodSecurity not asked", err)
		}
		label(`"privileged"`)
		if err := checkEmu(t, admin, dir, refusingEmulator{}, []string{"direct"}, "edg10"); err != nil {
			t.Errorf("kube-system privileged: %v", err)
		}
	})
	t.Run("StraitNotInstalled", func(t *testing.T) {
		wantErr(t, checkWith(t, admin, dir, []string{"direct", "strait"}, "lcl"), "cluster a: tool strait: no Deployment strait-system/strait-gateway: install deploy/ first")
	})
	t.Run("InstalledWithoutTemplate", func(t *testing.T) {
		wantErr(t, checkWith(t, admin, dir, []string{"installed"}, "lcl"), "tool installed: the clusters file has no installed template")
	})
	t.Run("EmulatedScenario", func(t *testing.T) {
		wantErr(t, checkWith(t, admin, dir, []string{"direct"}, "lcl", "edg10"), "scenario edg10 (lan delay 5ms jitter 1ms distribution uniform loss 0.08%, wan delay 5ms jitter 1ms distribution uniform loss 0.08%): link emulation on clusters is not available in this build")
	})
	t.Run("OneCluster", func(t *testing.T) {
		m, _ := ParseClusterMap([]byte(admin), dir)
		b, _ := New(Options{Clusters: m})
		wantErr(t, b.Check(ctx, run.BackendPlan{Server: "a/server", Client: "a/client"}), "are in one cluster")
	})
}

// refusingEmulator is an Emulator the preflight accepts and no unit may
// use: Check never applies emulation.
type refusingEmulator struct{}

func (refusingEmulator) Apply(context.Context, string, []EmuTarget, emulation.Params) (Applied, error) {
	return nil, errors.New("refusingEmulator: no emulation in a preflight test")
}

func (refusingEmulator) Down(context.Context, *rest.Config, string) error {
	return errors.New("refusingEmulator: no emulation in a preflight test")
}

// Needs are linkemu's, as cmd/strait's adapter gives them: the preflight
// checks what the emulation the lab runs needs.
func (refusingEmulator) Needs() EmuNeeds {
	n := EmuNeeds{Namespace: linkemu.Namespace, PodSecurity: linkemu.PodSecurity, What: linkemu.What}
	for _, r := range linkemu.Rights {
		n.Rights = append(n.Rights, EmuRight{Verb: r.Verb, Group: r.Group, Resource: r.Resource})
	}
	return n
}
