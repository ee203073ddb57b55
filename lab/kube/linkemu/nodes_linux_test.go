package linkemu_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/internal/testenv/k8snodes"
)

// patience bounds every wait on real nodes; a hang detector, not a
// performance bound (the suite shares 2 cores with everything else).
const patience = 4 * time.Minute

// pair is two clusters a and b of one node each from scripts/k8s-nodes.sh,
// without WAN emulation of the lab's own.
type pair struct {
	*k8snodes.Nodes
	config map[string]*rest.Config
}

// upPair brings up a pair, or uses the one named by STRAIT_LINKEMU_LAB
// (an iteration aid: `scripts/k8s-nodes.sh up NAME --clusters a,b` once,
// then run the test many times; the lab's image must hold this checkout's
// strait).
func upPair(t *testing.T) *pair {
	t.Helper()
	var n *k8snodes.Nodes
	if name := os.Getenv("STRAIT_LINKEMU_LAB"); name != "" {
		n = k8snodes.Attach(t, name, "a", "b")
	} else {
		n = k8snodes.Up(t, "le", "", "a", "b")
	}
	p := &pair{Nodes: n, config: map[string]*rest.Config{}}
	for c, kubeconfig := range n.Kubeconfig {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatalf("cluster %s: kubeconfig %s: %v", c, kubeconfig, err)
		}
		// The API server listens in the node's namespace; the test's
		// client connects from there.
		cfg.Dial = dialIn(n.Netns[c])
		p.config[c] = cfg
	}
	return p
}

// dialIn returns a dialer whose sockets are created in network namespace
// netns: a socket stays in the namespace it was made in, so only its
// creation runs on a thread switched there.
func dialIn(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			target, err := unix.Open("/var/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer unix.Close(target)
			orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer unix.Close(orig)
			if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
				// Only a thread back in its own namespace may serve
				// other goroutines; otherwise it ends with this one.
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// remote is what cluster c's side impairs: the other cluster's node (its
// address and its address on the link), pods and services (docs/k8s-nodes.md's
// ranges; only node addresses are routed between the clusters there).
func (p *pair) remote(t *testing.T, c string) []netip.Prefix {
	t.Helper()
	other, i := "b", 1
	if c == "b" {
		other, i = "a", 0
	}
	// The other node's address on the link: where it masquerades its pods'
	// traffic to (MASQUERADE takes the outgoing interface's address, not
	// the node's InternalIP on lo), so replies to pods go there.
	route := strings.Fields(testenv.Run(t, "ip", "-n", p.Netns[c], "route", "get", p.Addr[other]))
	var via string
	for i, f := range route {
		if f == "via" && i+1 < len(route) {
			via = route[i+1]
		}
	}
	if via == "" {
		t.Fatalf("%s: no next hop toward %s: %v", c, p.Addr[other], route)
	}
	return []netip.Prefix{
		netip.MustParsePrefix(p.Addr[other] + "/32"),
		netip.MustParsePrefix(via + "/32"),
		netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", 100+i)),
		netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", 150+i)),
	}
}

// rtt pings b's node from a's node's namespace (a probe outside the lab and
// the emulation) and returns the minimum and the median in ms.
func (p *pair) rtt(t *testing.T) (min, median float64) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", p.Netns["a"], "ping", "-n", "-c", "20", "-i", "0.05", "-W", "5", p.Addr["b"]).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from %s: %v\n%s", p.Addr["b"], p.Netns["a"], err, out)
	}
	var v []float64
	for _, line := range strings.Split(string(out), "\n") {
		if _, after, ok := strings.Cut(line, "time="); ok {
			var ms float64
			if _, err := fmt.Sscan(strings.TrimSuffix(after, " ms"), &ms); err == nil {
				v = append(v, ms)
			}
		}
	}
	if len(v) < 15 {
		t.Fatalf("ping: %d of 20 replies:\n%s", len(v), out)
	}
	sort.Float64s(v)
	return v[0], v[len(v)/2]
}

// state is what the emulation may add to the nodes: devices, qdiscs and tc
// programs, per node.
func (p *pair) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range []string{"a", "b"} {
		ns := p.Netns[c]
		links := testenv.Run(t, "ip", "-n", ns, "-o", "link", "show")
		var names []string
		for _, l := range strings.Split(links, "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				names = append(names, strings.TrimSuffix(f[1], ":"))
			}
		}
		fmt.Fprintf(&b, "%s links: %s\n", c, strings.Join(names, " "))
		fmt.Fprintf(&b, "%s qdiscs: %s", c, testenv.Run(t, "tc", "-n", ns, "qdisc", "show"))
		fmt.Fprintf(&b, "%s programs: %s", c, testenv.Run(t, "ip", "netns", "exec", ns, "bpftool", "net", "show"))
		// bpftool before v7.3 does not list tcx links, the agent's.
		fmt.Fprintf(&b, "%s tcx programs: %s\n", c, strings.Join(testenv.TCXLinks(t, ns), ", "))
	}
	return b.String()
}

// throughput runs iperf3 (with extra arguments) from a's node to b's node
// for 3 s and returns what b received, in Mbit/s.
func (p *pair) throughput(t *testing.T, extra ...string) float64 {
	t.Helper()
	port := "5299"
	srv := testenv.Start(t, "ip", "netns", "exec", p.Netns["b"], "iperf3", "-s", "-1", "-p", port, "-B", p.Addr["b"])
	defer func() { _ = srv.Process.Kill() }()
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// iperf3 -J exits 0 when it cannot connect, saying so in "error".
		args := append([]string{"netns", "exec", p.Netns["a"], "iperf3", "-c", p.Addr["b"], "-p", port, "-t", "3", "-J"}, extra...)
		out, err := exec.Command("ip", args...).CombinedOutput()
		r.Error, r.End.SumReceived.BitsPerSecond = "", 0
		if err == nil {
			err = jsonUnmarshal(out, &r)
		}
		if err == nil && r.Error == "" && r.End.SumReceived.BitsPerSecond > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("iperf3 to %s: %v\n%s", p.Addr["b"], err, out)
		}
		time.Sleep(200 * time.Millisecond) // the server is not listening yet
	}
	return r.End.SumReceived.BitsPerSecond / 1e6
}

// podConnect has a pod in b (the curl image scripts/k8s-images.sh builds)
// connect to an HTTP server on a's node five times, and returns curl's
// connect times, shortest first.
func (p *pair) podConnect(t *testing.T, ctx context.Context) []time.Duration {
	t.Helper()
	srv := testenv.Start(t, "ip", "netns", "exec", p.Netns["a"], "python3", "-m", "http.server", "8099", "--bind", p.Addr["a"])
	defer func() { _ = srv.Process.Kill() }()
	ver, err := exec.Command("curl", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	image := "localhost/strait-lab/curl:" + strings.Fields(string(ver))[1]
	url := "http://" + p.Addr["a"] + ":8099/"
	// The server listens before the first connection, so every connect
	// time is one handshake, not a retry after a refusal.
	waitFor(t, "the HTTP server on a's node", func() error {
		out, err := exec.Command("ip", "netns", "exec", p.Netns["a"], "ss", "-Hltn", "sport = :8099").Output()
		if err != nil || len(strings.TrimSpace(string(out))) == 0 {
			return fmt.Errorf("not listening yet (%v)", err)
		}
		return nil
	})
	args := []string{"-sS", "-w", "%{time_connect}\n"}
	for i := 0; i < 5; i++ {
		args = append(args, "-o", "/dev/null", url) // -o is per URL
	}
	c := kubernetes.NewForConfigOrDie(p.config["b"])
	name := testenv.UniqueName("linkemu-curl-")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "curl", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: args}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	waitFor(t, "curl pod "+name+" done", func() error {
		got, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case got.Status.Phase == corev1.PodFailed:
			logs, _ := c.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("curl pod failed: %s", logs)
		case got.Status.Phase != corev1.PodSucceeded:
			return fmt.Errorf("phase %s", got.Status.Phase)
		}
		return nil
	})
	logs, err := c.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	// Only whole lines of -w's output are connect times; an error line
	// ("Failed to connect to ADDR port 8099 after 67 ms") has numbers too.
	for _, line := range strings.Split(string(logs), "\n") {
		if s, err := strconv.ParseFloat(strings.TrimSpace(line), 64); err == nil {
			out = append(out, time.Duration(s*float64(time.Second)))
		}
	}
	if len(out) != 5 {
		t.Fatalf("curl pod printed %q, want five connect times", logs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
