package k8s

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/gatewaytest"
	"github.com/strait-net/strait/internal/testenv"
)

// startGateway runs a gateway in this process with its admin socket and
// returns the socket's path once it answers.
func startGateway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir() // short enough for a unix socket path
	if _, err := fabric.InitDir(dir, "pods", 24*time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.IssueFiles(dir, dir, "a", 12*time.Hour); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	gatewaytest.Start(t, gateway.Config{Cluster: "a", Identity: gateway.IdentityFiles{Dir: dir}, Listen: testenv.FreeAddr(t),
		Admin: sock, State: filepath.Join(dir, "state.json"), Preconnect: -1, Intercept: gateway.InterceptListeners})
	return sock
}

func pod(ns, name string, labels map[string]string, mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	for _, m := range mod {
		m(p)
	}
	return p
}

// running sets a pod's status as a kubelet would: the API server has
// none, and the status subresource is the only way to set pod IPs.
func running(t *testing.T, c client.Client, ns, name string, ips ...string) {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(context.Background(), keyOf(ns, name), &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ips[0]
	p.Status.PodIPs = nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	// Churn the gateways must not see: a condition.
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(context.Background(), &p); err != nil {
		t.Fatalf("set status of pod %s/%s: %v", ns, name, err)
	}
}

// TestPodWorkloads: a controller pushing to a real gateway gives it one
// Workload per running pod with an IP, of the pod's namespace and labels,
// and follows pod creation, a pod's start, relabelling and deletion;
// pending and host-network pods have none.
func TestPodWorkloads(t *testing.T) {
	k := apiServer(t)
	c := k.Client
	ns := namespace(t, c)
	ctx := context.Background()
	sock := startGateway(t)
	run(t, Config{Cluster: "a", REST: k.Config, SyncOnly: true, GatewayAdmin: []string{sock}})
	ad := gateway.NewAdminClient(sock)

	// expect waits until the gateway's Workloads of ns are want: name →
	// "role addresses".
	expect := func(what string, want map[string]string) {
		t.Helper()
		eventually(t, what, func() error {
			rs, err := ad.List(string(catalog.KindWorkload))
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, r := range rs {
				w := r.(*catalog.Workload)
				if w.Metadata.Namespace == ns {
					got[w.Metadata.Name] = w.Metadata.Labels["role"] + " " + strings.Join(w.Spec.Addresses, ",")
				}
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("gateway has %v, want %v", got, want)
			}
			return nil
		})
	}

	create(t, c,
		pod(ns, "web", map[string]string{"role": "web"}),
		pod(ns, "blocked", map[string]string{"role": "blocked"}),
		pod(ns, "host", map[string]string{"role": "web"}, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		pod(ns, "pending", map[string]string{"role": "web"}))
	running(t, c, ns, "web", "10.244.1.5")
	running(t, c, ns, "blocked", "10.244.1.6", "fd00:10:244:1::6")
	running(t, c, ns, "host", "192.0.2.10")
	expect("workloads of the running pods", map[string]string{"web": "web 10.244.1.5", "blocked": "blocked 10.244.1.6,fd00:10:244:1::6"})

	running(t, c, ns, "pending", "10.244.1.7")
	expect("a pod started", map[string]string{"web": "web 10.244.1.5", "blocked": "blocked 10.244.1.6,fd00:10:244:1::6", "pending": "web 10.244.1.7"})

	var p corev1.Pod
	if err := c.Get(ctx, keyOf(ns, "blocked"), &p); err != nil {
		t.Fatal(err)
	}
	p.Labels["role"] = "trusted"
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	expect("relabelled", map[string]string{"web": "web 10.244.1.5", "blocked": "trusted 10.244.1.6,fd00:10:244:1::6", "pending": "web 10.244.1.7"})

	for _, name := range []string{"web", "pending"} {
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	expect("pods deleted", map[string]string{"blocked": "trusted 10.244.1.6,fd00:10:244:1::6"})
}

// TestPodChanges: pod updates that leave the Workload as it was (status
// churn) are filtered out before they cost a pass; those that change it
// are not.
func TestPodChanges(t *testing.T) {
	base := func() *corev1.Pod {
		p := pod("ns", "p", map[string]string{"role": "web"})
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}}
		return p
	}
	pred := podChanges()
	for _, tt := range []struct {
		name string
		mod  func(*corev1.Pod)
		want bool
	}{
		{"a condition", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		}, false},
		{"an annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }, false},
		{"a label", func(p *corev1.Pod) { p.Labels["role"] = "blocked" }, true},
		{"an address", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::1"}) }, true},
		{"the phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
	} {
		newer := base()
		tt.mod(newer)
		if got := pred.Update(ctrlevent.UpdateEvent{ObjectOld: base(), ObjectNew: newer}); got != tt.want {
			t.Errorf("update of %s: enqueue %v, want %v", tt.name, got, tt.want)
		}
	}
	// The cache's stripped copy still yields the same Workload.
	full := base()
	full.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", Value: strings.Repeat("x", 1000)}}
	stripped, _ := stripPod(full)
	if a, b := workloadOf(full), workloadOf(stripped.(*corev1.Pod)); !reflect.DeepEqual(a, b) || a == nil {
		t.Errorf("workload of the stripped pod %+v, of the pod %+v", b, a)
	}
	var names []string
	for _, ip := range []string{"::ffff:10.0.0.9", "FD00::0:9"} {
		p := base()
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		names = append(names, strings.Join(workloadOf(p).Spec.Addresses, ","))
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "10.0.0.9 fd00::9" {
		t.Errorf("addresses %q, want canonical and unmapped", names)
	}
}
