package linkemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/internal/testenv/k8snodes"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/linkemu"
	"github.com/strait-net/strait/lab/kube/linkemu/nodeemu"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func (p *pair) targets(t *testing.T, clusters ...string) []linkemu.Target {
	var ts []linkemu.Target
	for _, c := range clusters {
		ts = append(ts, linkemu.Target{Cluster: c, Config: p.config[c], Remote: p.remote(t, c)})
	}
	return ts
}

// TestEmulationOnNodes applies emulation between two real clusters and checks
// it from outside, with ping and iperf3 between the nodes: a delay moves the
// round trip by twice the delay (each cluster's egress, as the namespace lab
// impairs each direction of a WAN link), a rate caps the throughput, and
// after Remove the round trip and the nodes' devices, qdiscs and tc programs
// are as before. Then an agent killed with SIGKILL: its leftovers are
// removed by the next pod, and by Down.
func TestEmulationOnNodes(t *testing.T) {
	k8snodes.Require(t, "ping", "iperf3", "tc", "python3")
	p := upPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	run := testenv.UniqueName("linkemu-test-")

	baseMin, baseMed := p.rtt(t)
	before := p.state(t)
	t.Logf("before: rtt min %.3f ms median %.3f ms (load %s)", baseMin, baseMed, loadavg())

	t.Run("Delay", func(t *testing.T) {
		const delay = 5 * time.Millisecond
		start := time.Now()
		a, err := linkemu.Apply(ctx, run, p.targets(t, "a", "b"), emulation.Params{Delay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Remove(context.Background(), nil) }) // after a failure; a no-op otherwise
		t.Logf("Apply: %v", time.Since(start).Round(time.Millisecond))
		// A BestEffort agent's emulator loses the CPU to the pods whose
		// traffic it delays (linkemu.CPURequest).
		for _, c := range []string{"a", "b"} {
			// What checkClean finds gone after Remove is there now.
			if links := testenv.TCXLinks(t, p.Netns[c]); len(links) < 2 {
				t.Errorf("cluster %s: tcx programs on the node: %v, want the agent's egress and ingress ones", c, links)
			}
			pods, err := kubernetes.NewForConfigOrDie(p.config[c]).CoreV1().Pods(linkemu.Namespace).List(ctx,
				metav1.ListOptions{LabelSelector: linkemu.LabelComponent + "=linkemu"})
			if err != nil || len(pods.Items) == 0 {
				t.Fatalf("cluster %s: the agents' pods: %v (%d found)", c, err, len(pods.Items))
			}
			for _, pod := range pods.Items {
				if pod.Status.QOSClass == "BestEffort" {
					t.Errorf("cluster %s: agent pod %s is BestEffort (cgroup cpu.shares 2), want a CPU request", c, pod.Name)
				}
			}
		}
		min, med := p.rtt(t)
		t.Logf("delay 5ms each way: rtt min %.3f ms median %.3f ms (load %s)", min, med, loadavg())
		// A delay is a floor: no load makes the round trip shorter than
		// the two delays; the ceiling only has to catch a wrong multiple.
		if want := baseMin + 2*delay.Seconds()*1000 - 0.5; min < want {
			t.Errorf("rtt min %.3f ms with the emulation, want at least %.3f (baseline %.3f + 2 × 5 ms)", min, want, baseMin)
		}
		if limit := baseMed + 2*delay.Seconds()*1000 + 25; med > limit {
			t.Errorf("rtt median %.3f ms with the emulation, want at most %.3f (2 × 5 ms over the baseline, 25 ms room for load)", med, limit)
		}
		// A pod's traffic too: masqueraded to b's node address, taken after
		// NAT and put back past netfilter, its handshakes take the delay.
		connect := p.podConnect(t, ctx)
		t.Logf("a pod in b: TCP connect to a's node %v (load %s)", connect, loadavg())
		if want := 2*delay - 500*time.Microsecond; connect[0] < want {
			t.Errorf("a pod in b connected to a's node in %v, want at least %v", connect[0], want)
		}
		start = time.Now()
		var logs strings.Builder
		if err := a.Remove(ctx, &logs); err != nil {
			t.Fatal(err)
		}
		t.Logf("Remove: %v", time.Since(start).Round(time.Millisecond))
		// The agents' logs end with the userspace emulator's counters,
		// which it logs as its pod stops (netem keeps none): the pings
		// above crossed it.
		for _, c := range []string{"a", "b"} {
			section := regexp.MustCompile(`(?s)# cluster ` + c + `, node [^\n]+\n(.*?)(\n# cluster |$)`).FindStringSubmatch(logs.String())
			if section != nil && !strings.Contains(section[1], `"emulator running"`) {
				continue // netem
			}
			if section == nil || !regexp.MustCompile(`"link counters".*packets_in=[1-9]`).MatchString(section[1]) {
				t.Errorf("cluster %s: the agent's log kept by Remove has no link counters with packets:\n%s", c, logs.String())
			}
		}
		p.checkClean(t, baseMin, before)
	})

	t.Run("RateOnly", func(t *testing.T) {
		// Only a's egress: a rate-only spec is a tbf on the node.
		const mbit = 20
		a, err := linkemu.Apply(ctx, run, p.targets(t, "a"), emulation.Params{Rate: mbit * 1e6})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Remove(context.Background(), nil) })
		got := p.throughput(t)
		t.Logf("rate 20mbit: iperf3 a→b %.1f Mbit/s (load %s)", got, loadavg())
		if got > mbit*1.1 || got < mbit*0.5 {
			t.Errorf("throughput %.1f Mbit/s through a 20 Mbit/s emulation, want 10–22", got)
		}
		if err := a.Remove(ctx, nil); err != nil {
			t.Fatal(err)
		}
		p.checkClean(t, baseMin, before)
	})

	t.Run("Faults", func(t *testing.T) {
		delay := emulation.Params{Delay: time.Millisecond}
		expect := func(t *testing.T, err error, want ...string) {
			t.Helper()
			if err == nil {
				t.Fatalf("Apply succeeded, want an error naming %q", want)
			}
			t.Logf("error: %v", err)
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		}
		t.Run("UnreachableCluster", func(t *testing.T) {
			cfg := *p.config["a"]
			cfg.Dial = nil
			cfg.Host = "https://192.0.2.1:6443" // TEST-NET-1: nothing answers
			cfg.Timeout = 3 * time.Second
			_, err := linkemu.Apply(ctx, run, []linkemu.Target{{Cluster: "x", Config: &cfg, Remote: p.remote(t, "a")}}, delay)
			expect(t, err, "cluster x", "list nodes")
		})
		t.Run("NoSuchNode", func(t *testing.T) {
			ts := p.targets(t, "a")
			ts[0].Nodes = []string{"a-n9"}
			_, err := linkemu.Apply(ctx, run, ts, delay)
			expect(t, err, "cluster a", "node a-n9", "not found")
		})
		t.Run("NoRoute", func(t *testing.T) {
			// The agent starts and fails: its message comes back.
			ts := p.targets(t, "a")
			ts[0].Remote = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
			_, err := linkemu.Apply(ctx, run, ts, delay)
			expect(t, err, "cluster a", "node a-n1", "no route from this node")
		})
		t.Run("ImageMissing", func(t *testing.T) {
			defer func(img string) { linkemu.Image = img }(linkemu.Image)
			linkemu.Image = "ghcr.io/strait-net/strait:no-such-tag"
			_, err := linkemu.Apply(ctx, run, p.targets(t, "a"), delay)
			expect(t, err, "cluster a", "node a-n1", "no-such-tag")
		})
		t.Run("PodSecurity", func(t *testing.T) {
			c := kubernetes.NewForConfigOrDie(p.config["a"])
			label := func(v string) {
				t.Helper()
				patch := `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":null}}}`
				if v != "" {
					patch = `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"` + v + `"}}}`
				}
				if _, err := c.CoreV1().Namespaces().Patch(ctx, linkemu.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			label("baseline")
			defer label("")
			_, err := linkemu.Apply(ctx, run, p.targets(t, "a"), delay)
			expect(t, err, "cluster a", "PodSecurity", "baseline")
		})
		t.Run("NoFreeCPU", func(t *testing.T) {
			// A node whose CPU is all requested: the agent's pod (it
			// requests CPURequest) stays Pending, and Apply must say
			// so with the scheduler's reason, not at its deadline.
			c := kubernetes.NewForConfigOrDie(p.config["a"])
			fillCPU(t, ctx, c, "a-n1")
			_, err := linkemu.Apply(ctx, run, p.targets(t, "a"), delay)
			expect(t, err, "cluster a", "node a-n1", "DaemonSet kube-system/strait-linkemu-", "Insufficient cpu", "unschedulable for", "requests 1 CPU")
			// The scheduler's refusal, not the deadline's.
			if err != nil && (strings.Contains(err.Error(), "deadline") || ctx.Err() != nil) {
				t.Errorf("Apply failed at its deadline, not on the scheduler's refusal: %v", err)
			}
		})
		// Each failed Apply removed what it had created.
		c := kubernetes.NewForConfigOrDie(p.config["a"])
		ds, err := c.AppsV1().DaemonSets(linkemu.Namespace).List(ctx, metav1.ListOptions{LabelSelector: linkemu.LabelManagedBy + "=strait-lab"})
		if err != nil || len(ds.Items) != 0 {
			t.Errorf("after failed Applies: %d DaemonSets (err %v)", len(ds.Items), err)
		}
	})

	t.Run("KilledAgent", func(t *testing.T) {
		// tbf leaves a veth pair behind when its agent dies by SIGKILL
		// (TUNs and tc programs die with the process).
		a, err := linkemu.Apply(ctx, run, p.targets(t, "a"), emulation.Params{Rate: 100e6})
		if err != nil {
			t.Fatal(err)
		}
		prefix := nodeemu.Prefix(run)
		first := p.devices(t, "a", prefix)
		if len(first) != 2 {
			t.Fatalf("a: devices %v, want one veth pair named %s…", first, prefix)
		}
		killAgent(t, run)
		// The container restarts; its agent removes the pair it finds and
		// makes its own: the ifindexes change.
		waitFor(t, "a: the restarted agent's own veth pair", func() error {
			now := p.devices(t, "a", prefix)
			if len(now) != 2 || now[0] == first[0] || now[1] == first[1] {
				return fmt.Errorf("devices %v (first agent's: %v)", now, first)
			}
			return nil
		})
		if err := waitReady(ctx, p, "a", run); err != nil {
			t.Fatal(err)
		}
		// Killed again, then Down: nothing of the run is left.
		killAgent(t, run)
		if err := linkemu.DownCluster(ctx, "a", p.config["a"], run); err != nil {
			t.Fatal(err)
		}
		if left := p.devices(t, "a", prefix); len(left) != 0 {
			t.Errorf("after Down: devices %v left", left)
		}
		c := kubernetes.NewForConfigOrDie(p.config["a"])
		ds, err := c.AppsV1().DaemonSets(linkemu.Namespace).List(ctx, metav1.ListOptions{LabelSelector: linkemu.LabelManagedBy + "=strait-lab"})
		if err != nil || len(ds.Items) != 0 {
			t.Errorf("after Down: DaemonSets %v (err %v)", ds, err)
		}
		_ = a // Down replaced its Remove
		p.checkClean(t, baseMin, before)
	})
}

// checkClean asserts the round trip and the nodes' state are as before.
func (p *pair) checkClean(t *testing.T, baseMin float64, before string) {
	t.Helper()
	min, _ := p.rtt(t)
	if min > baseMin+2 {
		t.Errorf("rtt min %.3f ms after removal, baseline %.3f", min, baseMin)
	}
	if after := p.state(t); after != before {
		t.Errorf("nodes after removal differ from before:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// devices lists cluster c's node's interfaces whose name starts with prefix,
// as "name@ifindex".
func (p *pair) devices(t *testing.T, c, prefix string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(testenv.Run(t, "ip", "-n", p.Netns[c], "-o", "link", "show"), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], prefix) {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			out = append(out, name+"@"+strings.TrimSuffix(f[0], ":"))
		}
	}
	return out
}

// killAgent SIGKILLs the agent process of run (the test started it, through
// its DaemonSet; the run name makes the command line unique).
func killAgent(t *testing.T, run string) {
	t.Helper()
	var pid int
	waitFor(t, "the agent process of "+run, func() error {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			args := strings.Split(string(b), "\x00")
			if len(args) > 4 && strings.HasSuffix(args[0], "strait") && args[2] == "node-emulate" && args[3] == "--run" && args[4] == run {
				fmt.Sscan(strings.Split(f, "/")[2], &pid)
				return nil
			}
		}
		return fmt.Errorf("no process")
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

func waitReady(ctx context.Context, p *pair, c, run string) error {
	cl := kubernetes.NewForConfigOrDie(p.config[c])
	for {
		pods, err := cl.CoreV1().Pods(linkemu.Namespace).List(ctx, metav1.ListOptions{LabelSelector: linkemu.LabelRun + "=" + run})
		if err == nil && len(pods.Items) == 1 {
			for _, cond := range pods.Items[0].Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s: agent pod of %s not ready again: %w", c, run, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fillCPU requests, with a pause pod on node, all of its allocatable CPU but
// half a core, so that no pod asking for a whole one fits, once the node
// has it; the test's cleanup deletes it.
func fillCPU(t *testing.T, ctx context.Context, c kubernetes.Interface, node string) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	free := n.Status.Allocatable.Cpu().MilliValue()
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			free -= ctr.Resources.Requests.Cpu().MilliValue()
		}
	}
	want := free - 500
	t.Logf("node %s: %dm CPU allocatable, %dm free; the hog requests %dm", node, n.Status.Allocatable.Cpu().MilliValue(), free, want)
	if want <= 0 {
		t.Fatalf("node %s has %dm CPU free: too little to leave exactly half a core", node, free)
	}
	name := testenv.UniqueName("linkemu-hog-")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "hog", Image: "registry.k8s.io/pause:3.10.1", ImagePullPolicy: corev1.PullIfNotPresent,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(want, resource.DecimalSI)}},
		}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered before the wait, so a hog that never runs goes too.
	t.Cleanup(func() {
		_ = c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	waitFor(t, "hog pod "+name+" running", func() error {
		got, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s %s", got.Status.Phase, got.Status.Message)
		}
		return nil
	})
}

func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	k8snodes.Eventually(t, what, patience, 200*time.Millisecond, f)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// TestDownAll is `strait lab down` for clusters: every link emulation of
// every run goes from the pair named by STRAIT_LINKEMU_LAB (an iteration aid:
// it skips without one).
func TestDownAll(t *testing.T) {
	if os.Getenv("STRAIT_LINKEMU_LAB") == "" {
		t.Skip("STRAIT_LINKEMU_LAB names no lab")
	}
	p := upPair(t)
	for _, c := range []string{"a", "b"} {
		start := time.Now()
		if err := linkemu.DownCluster(context.Background(), c, p.config[c], ""); err != nil {
			t.Fatal(err)
		}
		t.Logf("cluster %s: Down: %v", c, time.Since(start).Round(time.Millisecond))
		if left := p.devices(t, c, nodeemu.Prefix("")); len(left) != 0 {
			t.Errorf("cluster %s: devices %v left", c, left)
		}
	}
}

// TestMeasureOnNodes prints what the emulation gives on the pair named by
// STRAIT_LINKEMU_LAB, for comparison with `strait lab check-link` on the
// namespace lab (docs/lab-clusters-emulation.md): ping's round trip (200
// probes) and iperf3's throughput a→b, per spec, each direction impaired.
// It measures, it asserts nothing; it skips unless STRAIT_LINKEMU_MEASURE=1.
func TestMeasureOnNodes(t *testing.T) {
	if os.Getenv("STRAIT_LINKEMU_LAB") == "" || os.Getenv("STRAIT_LINKEMU_MEASURE") != "1" {
		t.Skip("set STRAIT_LINKEMU_LAB and STRAIT_LINKEMU_MEASURE=1")
	}
	p := upPair(t)
	ctx := context.Background()
	for _, c := range []string{"a", "b"} {
		if err := linkemu.DownCluster(ctx, c, p.config[c], "measure"); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []emulation.Spec{{}, {Delay: "5ms"}, {Rate: "20mbit"}, {Delay: "5ms", Rate: "100mbit"}, {Delay: "5ms", Jitter: "1ms", Loss: "0.08%", Rate: "1gbit"}} {
		params, err := s.Params()
		if err != nil {
			t.Fatal(err)
		}
		a, err := linkemu.Apply(ctx, "measure", p.targets(t, "a", "b"), params)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Remove(context.Background(), nil) }) // after a failure
		out := testenv.Run(t, "ip", "netns", "exec", p.Netns["a"], "ping", "-n", "-q", "-c", "200", "-i", "0.01", p.Addr["b"])
		rtt := out[strings.LastIndex(out, "rtt"):]
		// bbr, as check-link measures (the lab's nodes default to cubic)
		mbit := p.throughput(t, "-C", "bbr")
		t.Logf("%-40s ping %s iperf3 (bbr) %.1f Mbit/s (load %s)", params.String(), strings.TrimSpace(rtt), mbit, loadavg())
		if err := a.Remove(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}
