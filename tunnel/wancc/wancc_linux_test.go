package wancc

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
)

func available(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func register(t *testing.T) *Algorithm {
	t.Helper()
	return registerWith(t, Options{MinAllowance: WANAllowance})
}

func registerWith(t *testing.T, opts Options) *Algorithm {
	t.Helper()
	testenv.RequireRoot(t)
	if err := features.HaveMapType(ebpf.StructOpsMap); err != nil {
		t.Skipf("the kernel has no BPF struct_ops: %v", err)
	}
	a, err := Register(testenv.UniqueName("wancc_t"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// TestRegister: the kernel lists the algorithm under its name while it is
// open, refuses a second one of the same name, and forgets it on Close.
func TestRegister(t *testing.T) {
	a := register(t)
	if !slices.Contains(available(t), a.Name()) {
		t.Fatalf("%s not in tcp_available_congestion_control: %v", a.Name(), available(t))
	}
	if b, err := Register(a.Name(), Options{}); err == nil {
		b.Close()
		t.Fatalf("a second %s registered", a.Name())
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(available(t), a.Name()) {
		t.Fatalf("%s still listed after Close", a.Name())
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestPerProcess: nothing is registered before Get; Get registers once,
// under the prefix and the process ID, and returns the same algorithm after.
func TestPerProcess(t *testing.T) {
	registerWith(t, Options{}) // the kernel can take one here, or skip
	p := NewPerProcess(testenv.UniqueName("p")[:5]+"_", Options{})
	if a := p.Registered(); a != nil {
		t.Fatalf("Registered before Get: %s", a.Name())
	}
	a, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if !strings.HasSuffix(a.Name(), "_"+strconv.Itoa(os.Getpid())) || !slices.Contains(available(t), a.Name()) {
		t.Fatalf("registered %q; available: %v", a.Name(), available(t))
	}
	if b, err := p.Get(); b != a || err != nil {
		t.Fatalf("second Get: %v, %v; want the first algorithm", b, err)
	}
	if p.Registered() != a {
		t.Fatal("Registered is not what Get returned")
	}
}

// TestPerProcessNameTaken: another process's algorithm under this
// process's name (a gateway in another PID namespace on the same kernel,
// also PID 1) leaves Get a random name of the same prefix, not cubic.
func TestPerProcessNameTaken(t *testing.T) {
	registerWith(t, Options{}) // the kernel can take one here, or skip
	prefix := testenv.UniqueName("p")[:5] + "_"
	other, err := Register(prefix+strconv.Itoa(os.Getpid()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	a, err := NewPerProcess(prefix, Options{}).Get()
	if err != nil {
		t.Fatalf("Get with its process's name taken: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if a.Name() == other.Name() || !strings.HasPrefix(a.Name(), prefix) || len(a.Name()) != MaxNameLen || !slices.Contains(available(t), a.Name()) {
		t.Fatalf("registered %q beside %q; available: %v", a.Name(), other.Name(), available(t))
	}
}

func TestRegisterRefusesBadInput(t *testing.T) {
	for name, want := range map[string]string{
		"":                 "want 1 to 15 bytes",
		"sixteen_bytes_xx": "want 1 to 15 bytes",
		"strait-1":         "letters, digits",
		"strait 1":         "letters, digits",
	} {
		if a, err := Register(name, Options{}); err == nil {
			a.Close()
			t.Errorf("Register(%q) succeeded", name)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("Register(%q): %v, want %q", name, err, want)
		}
	}
	for _, d := range []time.Duration{-time.Microsecond, 2 * time.Second} {
		if a, err := Register("strait_t", Options{MinAllowance: d}); err == nil {
			a.Close()
			t.Errorf("Register with MinAllowance %v succeeded", d)
		} else if !strings.Contains(err.Error(), "want 0 to 1s") {
			t.Errorf("Register with MinAllowance %v: %v, want \"want 0 to 1s\"", d, err)
		}
	}
}

// path is three namespaces in a row, a (10.77.1.1) — r — b (10.77.2.1):
// a sender, a router whose device towards b can hold a queue, a sink.
func path(t *testing.T) (a, r, b string) {
	a = testenv.Netns(t, testenv.UniqueName("wca"))
	r = testenv.Netns(t, testenv.UniqueName("wcr"))
	b = testenv.Netns(t, testenv.UniqueName("wcb"))
	testenv.Run(t, "ip", "-n", a, "link", "add", "v", "type", "veth", "peer", "va", "netns", r)
	testenv.Run(t, "ip", "-n", b, "link", "add", "v", "type", "veth", "peer", "vb", "netns", r)
	for _, c := range [][]string{
		{a, "addr", "add", "10.77.1.1/24", "dev", "v"},
		{r, "addr", "add", "10.77.1.2/24", "dev", "va"},
		{r, "addr", "add", "10.77.2.2/24", "dev", "vb"},
		{b, "addr", "add", "10.77.2.1/24", "dev", "v"},
		{a, "link", "set", "v", "up"},
		{r, "link", "set", "va", "up"},
		{r, "link", "set", "vb", "up"},
		{b, "link", "set", "v", "up"},
		{a, "route", "add", "default", "via", "10.77.1.2"},
		{b, "route", "add", "default", "via", "10.77.2.2"},
	} {
		testenv.Run(t, "ip", append([]string{"-n", c[0]}, c[1:]...)...)
	}
	testenv.Run(t, "ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return a, r, b
}

// send opens a connection from namespace a to a sink in b, on algorithm
// algo, writes n bytes and waits until the sink has them all; it returns
// the sender's TCP_INFO at the end.
func send(t *testing.T, a, b, algo string, n int) *unix.TCPInfo {
	t.Helper()
	ln, got, err := testenv.Sink(b, "10.77.2.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c net.Conn
	if err := testenv.InNetns(a, func() (err error) {
		c, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var serr error
	_ = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	})
	if serr != nil {
		t.Fatalf("TCP_CONGESTION %s: %v", algo, serr)
	}
	buf := make([]byte, 1<<20)
	for sent := 0; sent < n; sent += len(buf) {
		if _, err := c.Write(buf[:min(len(buf), n-sent)]); err != nil {
			t.Fatal(err)
		}
	}
	_ = raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if serr != nil {
		t.Fatal(serr)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if k := <-got; k != int64(n) {
		t.Fatalf("the sink got %d bytes, want %d", k, n)
	}
	c.Close()
	return info
}

// TestRandomLoss: on a link that drops one data packet in 300 and holds
// no queue, every loss is taken for random loss.
func TestRandomLoss(t *testing.T) {
	alg := register(t)
	a, _, b := path(t)
	dropEvery(t, b, 300)
	info := send(t, a, b, alg.Name(), 64<<20)
	l, err := alg.Losses()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("losses %+v; sender retransmitted %d segments, cwnd %d ssthresh %d", l, info.Total_retrans, info.Snd_cwnd, info.Snd_ssthresh)
	if info.Total_retrans == 0 {
		t.Fatal("nothing was lost: the drop rule did not work")
	}
	if l.Random == 0 || l.Queue != 0 {
		t.Fatalf("losses %+v: want random ones only", l)
	}
}

// TestQueueLoss: behind a router's 20 Mbit/s bottleneck whose queue holds 200 ms,
// a bulk sender fills the queue until it overflows; those losses are
// congestion.
func TestQueueLoss(t *testing.T) {
	alg := register(t)
	a, r, b := path(t)
	testenv.Run(t, "tc", "-n", r, "qdisc", "add", "dev", "vb", "root", "tbf", "rate", "20mbit", "burst", "16kb", "latency", "200ms")
	info := send(t, a, b, alg.Name(), 4<<20)
	l, err := alg.Losses()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("losses %+v; sender retransmitted %d segments, rtt %d µs, cwnd %d ssthresh %d", l, info.Total_retrans, info.Rtt, info.Snd_cwnd, info.Snd_ssthresh)
	if l.Queue == 0 {
		t.Fatalf("losses %+v: want losses behind the queue", l)
	}
}

// TestShallowQueue: behind a 200 Mbit/s bottleneck whose queue holds only
// 1 ms, as a switch's would, the losses are congestion for an algorithm
// without a least allowance (a LAN socket's, 50 µs from its peer), and
// random for the WAN one, whose allowance is that queue twice over.
func TestShallowQueue(t *testing.T) {
	lan := registerWith(t, Options{})
	wan := register(t)
	a, r, b := path(t)
	testenv.Run(t, "tc", "-n", r, "qdisc", "add", "dev", "vb", "root", "tbf", "rate", "200mbit", "burst", "16kb", "latency", "1ms")
	for _, alg := range []*Algorithm{lan, wan} {
		info := send(t, a, b, alg.Name(), 16<<20)
		l, err := alg.Losses()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: losses %+v; sender retransmitted %d segments, rtt %d µs, cwnd %d", alg.Name(), l, info.Total_retrans, info.Rtt, info.Snd_cwnd)
		if info.Total_retrans == 0 {
			t.Fatal("nothing was lost: the queue never overflowed")
		}
		if alg == lan && l.Queue == 0 {
			t.Errorf("LAN allowance: losses %+v, want losses behind the queue", l)
		}
		if alg == wan && l.Random == 0 {
			t.Errorf("WAN allowance: losses %+v, want random ones", l)
		}
	}
}

// dropEvery makes namespace ns drop every nth TCP segment it receives with
// a payload (nftables' incrementing counter, so the drops are regular).
func dropEvery(t *testing.T, ns string, n int) {
	t.Helper()
	rules := "table inet wancctest {\n chain in {\n  type filter hook input priority 0;\n" +
		"  meta l4proto tcp meta length > 1000 numgen inc mod " + strconv.Itoa(n) + " == 0 drop\n }\n}\n"
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
}
