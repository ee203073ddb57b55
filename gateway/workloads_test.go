package gateway_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/gatewaytest"
	"github.com/strait-net/strait/internal/testenv"
)

// TestWorkloadSources: Workloads pushed to a running gateway say who a
// client address is. A policy denying role=blocked refuses the client at
// a blocked Workload's address while its neighbour passes; relabelling or
// deleting the Workload takes effect on the next connection, without a
// restart; and a Workload's exact address wins over a configured source
// whose CIDR holds it. Both gateways run in this process on loopback; the
// clients bind distinct 127/8 addresses, which Linux routes on lo.
func TestWorkloadSources(t *testing.T) {
	dir := t.TempDir()
	if _, err := fabric.InitDir(dir, "workloads", 24*time.Hour, false); err != nil {
		t.Fatal(err)
	}
	wanA, wanB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	start := func(cluster, wan string, sources []gateway.Source) *gateway.AdminClient {
		if _, err := fabric.IssueFiles(dir, dir, cluster, 12*time.Hour); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, cluster+".sock")
		return gatewaytest.Start(t, gateway.Config{Cluster: cluster, Identity: gateway.IdentityFiles{Dir: dir}, Listen: wan,
			Admin: sock, State: filepath.Join(dir, cluster+"-state.json"), Preconnect: -1,
			Intercept: gateway.InterceptListeners, Sources: sources})
	}

	// The export's target: an echo server.
	target := testenv.FreeAddr(t)
	ln, err := net.Listen("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()

	const (
		blocked   = "127.0.0.2"
		neighbour = "127.0.0.3"
		covered   = "127.0.0.4" // also in a configured source, labelled blocked
	)
	a := start("a", wanA, nil)
	b := start("b", wanB, []gateway.Source{{CIDR: covered + "/32", Namespace: "web", Labels: map[string]string{"role": "blocked"}}})
	importAddr := testenv.FreeAddr(t)
	host, portText, _ := net.SplitHostPort(importAddr)
	port, _ := strconv.Atoi(portText)
	allowAll := &catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: "allow-all"}, Spec: catalog.AccessPolicySpec{Priority: 1000, Action: catalog.Allow}}
	mustApply := func(ad *gateway.AdminClient, rs ...catalog.Resource) {
		t.Helper()
		if res, err := ad.ApplyResources(rs); err != nil || res.Warning != "" {
			t.Fatalf("apply: %+v, %v", res, err)
		}
	}
	mustApply(a, allowAll, &catalog.Peer{Metadata: catalog.ObjectMeta{Name: "b"}, Spec: catalog.PeerSpec{Gateways: []string{wanB}}},
		&catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "echo", Namespace: "shop"},
			Spec: catalog.ServiceExportSpec{Target: target, Ports: []catalog.ServicePort{{Port: int32(port)}}}})
	mustApply(b, allowAll, &catalog.Peer{Metadata: catalog.ObjectMeta{Name: "a"}, Spec: catalog.PeerSpec{Gateways: []string{wanA}}},
		&catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: "echo", Namespace: "shop"},
			Spec: catalog.ServiceImportSpec{IPs: []string{host}, Ports: []catalog.ServicePort{{Port: int32(port)}},
				Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}},
		&catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: "deny-blocked"}, Spec: catalog.AccessPolicySpec{Priority: 10, Action: catalog.Deny,
			From: catalog.Source{WorkloadSelector: &catalog.LabelSelector{MatchLabels: map[string]string{"role": "blocked"}}}}})
	workload := func(name, addr, role string) *catalog.Workload {
		return &catalog.Workload{Metadata: catalog.ObjectMeta{Name: name, Namespace: "web", Labels: map[string]string{"role": role}},
			Spec: catalog.WorkloadSpec{Addresses: []string{addr}}}
	}

	// echo reports whether a connection from src through the import gets
	// its bytes back; a refused one is reset by b (policy denial) or
	// closed, never left hanging (the deadline only bounds a hang).
	echo := func(src string) (bool, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(netip.MustParseAddr(src).AsSlice())}, Timeout: patience}
		c, err := d.Dial("tcp", importAddr)
		if errors.Is(err, syscall.ECONNRESET) {
			return false, nil // the reset came before the dial returned
		}
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(patience))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false, nil
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, err
			}
			return false, nil
		}
		return string(buf) == "ping", nil
	}
	// expect polls until src's connections pass (or are refused): the
	// peer session comes up asynchronously, but a Workload applied before
	// the call is in force at once, so a refusal is never waited for.
	expect := func(what, src string, pass bool) {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			ok, err := echo(src)
			if err != nil {
				t.Fatalf("%s: connection from %s: %v", what, src, err)
			}
			if ok == pass {
				return
			}
			if !pass {
				t.Fatalf("%s: connection from %s passed, want it refused", what, src)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: connection from %s refused for %v, want it through", what, src, patience)
			}
		}
	}

	mustApply(b, workload("blocked", blocked, "blocked"), workload("neighbour", neighbour, "web"))
	expect("neighbour", neighbour, true)
	expect("blocked workload", blocked, false)
	expect("the configured source", covered, false)

	mustApply(b, workload("blocked", blocked, "web"))
	expect("blocked workload relabelled", blocked, true)
	mustApply(b, workload("blocked", blocked, "blocked"))
	expect("blocked workload labelled back", blocked, false)
	if _, err := b.DeleteResources([]catalog.Resource{workload("blocked", blocked, "blocked")}); err != nil {
		t.Fatal(err)
	}
	expect("blocked workload deleted (no source: default namespace, no labels)", blocked, true)

	// An exact Workload address beats the configured CIDR; when it goes,
	// the configured source applies again.
	mustApply(b, workload("covered", covered, "web"))
	expect("workload over the configured source", covered, true)
	if _, err := b.DeleteResources([]catalog.Resource{workload("covered", covered, "web")}); err != nil {
		t.Fatal(err)
	}
	expect("configured source after the workload went", covered, false)

	// Two workloads claiming one address (a pod IP reused before the old
	// pod's Workload is gone): the smaller key holds it whatever the order
	// of the applies, and the other takes over when it goes.
	mustApply(b, workload("z-new", neighbour, "blocked"))
	expect("second claim of the neighbour's address, larger key", neighbour, true)
	if _, err := b.DeleteResources([]catalog.Resource{workload("neighbour", neighbour, "web")}); err != nil {
		t.Fatal(err)
	}
	expect("first claim gone", neighbour, false)
}
