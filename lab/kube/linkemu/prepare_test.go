package linkemu_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/strait-net/strait/k8s/k8stest"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/linkemu"
)

// TestNotLinux asks for emulation on a cluster whose only node runs
// Windows, against a real API server (no kubelet: the test labels the
// node as a kubelet would): Apply and Down refuse before they create
// anything, naming the cluster and the node (docs/lab-clusters-emulation.md,
// the non-Linux row).
func TestNotLinux(t *testing.T) {
	c := k8stest.APIServer(t)
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1",
		Labels: map[string]string{corev1.LabelOSStable: "windows"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remote := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	p := emulation.Params{Delay: 5 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		nodes []string
		want  string
	}{
		{"Named", []string{"w1"}, `cluster a: node w1: runs "windows" (label kubernetes.io/os), not Linux: link emulation needs a Linux kernel`},
		{"Every", nil, "cluster a: no Linux node (label kubernetes.io/os=linux): link emulation needs a Linux kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := linkemu.Apply(ctx, "notlinux", []linkemu.Target{{Cluster: "a", Config: c.Config, Nodes: tc.nodes, Remote: remote}}, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply: %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("Down", func(t *testing.T) {
		want := "cluster a: no Linux node (label kubernetes.io/os=linux): link emulation needs a Linux kernel"
		if err := linkemu.DownCluster(ctx, "a", c.Config, "notlinux"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DownCluster: %v, want %q", err, want)
		}
	})
	ds, err := cs.AppsV1().DaemonSets(linkemu.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Items) != 0 {
		t.Errorf("%d DaemonSets in %s after the refusals, want none", len(ds.Items), linkemu.Namespace)
	}
}
