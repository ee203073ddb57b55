package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
	"github.com/strait-net/strait/load"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const twoClusters = `
name: x
clusters:
  - name: a
    nodes: [{name: gw, gateway: true}, {name: server}]
  - name: b
    nodes: [{name: gw, gateway: true}, {name: client}]
wan:
  - between: [a, b]
`

// needs lists the commands each tool runs besides strait.
var needs = map[string][]string{
	"vxlan":            {"nft", "ping"},
	"packet":           {"curl"},
	"strait-packet":    {"curl"},
	"wireguard":        {"wg", "nft", "ping"},
	"wireguard-debian": {"wireguard-go", "wg", "nft", "ping"},
	"envoy":            {"envoy", "curl"},
	"nebula":           {"nebula", "nebula-cert", "nft", "ping"},
}

// TestTools sets every tool up in turn in one lab, as the runner does,
// sends 1 MB echo requests through it (checked byte for byte), and checks
// that its teardown leaves every namespace as it found it: the same
// devices, routes, firewall rules and processes, so the next tool measures
// on the lab the first one had.
func TestTools(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	ctx := context.Background()
	l := upLab(t, bin)
	server, _ := l.Plan.Node("a/server")
	client, _ := l.Plan.Node("b/client")
	echo, err := l.Command(ctx, server.ID, bin, "app", "echo", "--listen", "0.0.0.0:8080")
	if err != nil {
		t.Fatal(err)
	}
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Process.Kill(); _ = echo.Wait() })

	for _, name := range tool.Names() {
		t.Run(name, func(t *testing.T) {
			for _, cmd := range needs[name] {
				if _, err := exec.LookPath(cmd); err != nil {
					t.Skipf("%s not installed (scripts/setup.sh installs it)", cmd)
				}
			}
			// The tool's directory exists before the first snapshot, which
			// lists the bpffs mounts below it.
			dir := t.TempDir()
			before := snapshot(t, l, dir)
			tl, err := tool.New(name)
			if err != nil {
				t.Fatal(err)
			}
			if name == "strait" {
				// A run directory too deep for a Unix socket path beside it
				// (a long --out): the admin sockets go elsewhere.
				dir = filepath.Join(dir, strings.Repeat("d", 100))
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			env := tool.Env{Lab: l, Server: server, Client: client, Services: []tool.Service{{Name: "echo", Port: 8080}},
				Dir: dir, Binary: bin}
			targets, err := tl.Setup(ctx, env)
			if err != nil {
				_ = tl.Teardown(ctx)
				if name == "wireguard" && strings.Contains(err.Error(), "not built") {
					t.Skip(err)
				}
				logs, _ := filepath.Glob(filepath.Join(env.Dir, "*.log"))
				for _, f := range logs {
					b, _ := os.ReadFile(f)
					t.Logf("%s:\n%s", filepath.Base(f), b)
				}
				t.Fatalf("setup: %v", err)
			}
			echoThrough(t, l, bin, client.ID, targets["echo"])
			if gw, _ := l.Plan.Node("a/gw"); name == "wireguard" && !fileExists(tool.WireguardSocket(gw.Netns)) {
				t.Errorf("no control socket %s while wireguard-go runs: the leftover check below would miss one", tool.WireguardSocket(gw.Netns))
			}
			if name == "packet" || name == "strait-packet" {
				udpThrough(t, l, bin, server.ID, client.ID, targets["echo"])
				// The snapshot sees what these tools attach and pin, or
				// its comparison after the teardown would prove nothing.
				if mid := snapshot(t, l, dir); !strings.Contains(mid, " tcx_ingress: program ") || !strings.Contains(mid, "  pin ") {
					t.Errorf("the snapshot shows no attached program or no pin while %s runs:\n%s", name, mid)
				}
			}
			if name == "strait-quic" {
				// The sessions are QUIC's: a UDP socket on the gateway
				// port and no TCP connection on it.
				gw, _ := l.Plan.Node("a/gw")
				port := "sport = :" + strconv.Itoa(tool.GatewayPort)
				tcp, err1 := exec.Command("ip", "netns", "exec", gw.Netns, "ss", "-tnH", "state", "established", "( "+port+" )").CombinedOutput()
				udp, err2 := exec.Command("ip", "netns", "exec", gw.Netns, "ss", "-unaH", "( "+port+" )").CombinedOutput()
				if err1 != nil || err2 != nil || len(strings.TrimSpace(string(tcp))) != 0 || len(strings.TrimSpace(string(udp))) == 0 {
					t.Errorf("a/gw's WAN sockets, want UDP only on port %d: %v %v\nTCP:\n%s\nUDP:\n%s", tool.GatewayPort, err1, err2, tcp, udp)
				}
			}
			if cc, ok := strings.CutPrefix(name, "strait-"); ok && cc != "packet" && cc != "quic" {
				gw, _ := l.Plan.Node("a/gw")
				out, err := exec.Command("ip", "netns", "exec", gw.Netns, "ss", "-tin", "state", "established", "( sport = :"+strconv.Itoa(tool.GatewayPort)+" )").CombinedOutput()
				if err != nil || !strings.Contains(string(out), cc) || strings.Contains(string(out), map[string]string{"bbr": "cubic", "cubic": "bbr"}[cc]) {
					t.Errorf("a/gw's WAN sockets, want all on %s: %v\n%s", cc, err, out)
				}
			}
			// strait's version is its executable's, here the test binary's.
			if v := tl.Version(ctx); !strings.HasPrefix(name, "strait") && (v == "" || strings.Contains(v, "unknown") || strings.Contains(v, "not found")) {
				t.Errorf("version %q", v)
			}
			if err := tl.Teardown(ctx); err != nil {
				t.Fatalf("teardown: %v", err)
			}
			if err := tl.Teardown(ctx); err != nil {
				t.Errorf("second teardown: %v", err)
			}
			if after := snapshot(t, l, dir); after != before {
				t.Errorf("teardown left the lab changed:\n--- before\n%s\n--- after\n%s", before, after)
			}
			// wireguard-go's control sockets are host-wide, outside the
			// lab; only this lab's are the test's (other labs on the host
			// have theirs).
			for _, n := range l.Plan.Nodes {
				if sock := tool.WireguardSocket(n.Netns); fileExists(sock) {
					t.Errorf("%s: control socket left: %s", n.ID, sock)
				}
			}
		})
	}
}

// TestDirectBBRSetsCongestionControl checks that direct-bbr's connections
// run bbr while the lab's default (and direct's) stays cubic.
func TestDirectBBRSetsCongestionControl(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	ctx := context.Background()
	l := upLab(t, bin)
	server, _ := l.Plan.Node("a/server")
	client, _ := l.Plan.Node("b/client")
	srv, err := l.Command(ctx, server.ID, bin, "load", "stream-server", "--listen", "0.0.0.0:5201")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for _, c := range []struct{ tool, want string }{{"direct", "cubic"}, {"direct-bbr", "bbr"}} {
		tl, _ := tool.New(c.tool)
		env := tool.Env{Lab: l, Server: server, Client: client, Services: []tool.Service{{Name: "stream", Port: 5201}}, Dir: t.TempDir(), Binary: bin}
		targets, err := tl.Setup(ctx, env)
		if err != nil {
			t.Fatalf("%s setup: %v", c.tool, err)
		}
		var res load.StreamResult
		out := filepath.Join(t.TempDir(), "stream.json")
		var last error
		for i := 0; i < 20; i++ {
			cmd, _ := l.Command(ctx, client.ID, bin, "load", "stream", "--server", targets["stream"], "--duration", "300ms", "--json", out)
			if b, err := cmd.CombinedOutput(); err != nil {
				last = fmt.Errorf("%v: %s", err, b)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			last = readJSONFile(out, &res)
			break
		}
		if last != nil {
			t.Fatalf("%s: load stream: %v", c.tool, last)
		}
		if res.CC != c.want {
			t.Errorf("%s: connections ran %q, want %q", c.tool, res.CC, c.want)
		}
		if err := tl.Teardown(ctx); err != nil {
			t.Fatalf("%s teardown: %v", c.tool, err)
		}
	}
}

func upLab(t *testing.T, bin string) *lab.Lab {
	t.Helper()
	topo, err := topology.Parse([]byte(twoClusters))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := topo.Plan()
	if err != nil {
		t.Fatal(err)
	}
	plan.Rename(testenv.UniqueName("tt"))
	opts := lab.Options{Binary: bin, StateDir: t.TempDir()}
	l, err := lab.Up(context.Background(), plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), plan.Name, opts); err != nil {
			t.Errorf("lab down: %v", err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		if strings.Contains(string(out), "st-"+plan.Name+"-") {
			t.Errorf("namespaces of lab %s left:\n%s", plan.Name, out)
		}
	})
	return l
}

// echoThrough sends 1 MB echo requests from the client node to target and
// fails t unless every response is the request, byte for byte.
func echoThrough(t *testing.T, l *lab.Lab, bin, client, target string) {
	t.Helper()
	cmd, err := l.Command(context.Background(), client, bin, "load", "seq", "--url", "http://"+target+"/",
		"--requests", "5", "--payload", "1000000", "--verify-echo", "--response-timeout", "10s", "--csv", "-", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("load seq through %s: %v", target, err)
	}
	samples, err := load.ReadCSV(strings.NewReader(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 5 {
		t.Fatalf("%d samples, want 5", len(samples))
	}
	for _, s := range samples {
		if !s.OK() {
			t.Errorf("request %d failed: %+v", s.Seq, s)
		}
	}
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

var counters = regexp.MustCompile(`(?m)^\s+(RX|TX|link/|altname).*\n`)

// snapshot describes every namespace of the lab: devices, addresses,
// routes, firewall, processes and the BPF programs attached to its devices
// with their links and maps; and the bpffs mounts at or below dir with
// their pins, and the BPF objects the test process holds open. What the
// packet tools pin outlives their processes (docs/packet.md, "The
// gateway"): their teardown must take it all down.
func snapshot(t *testing.T, l *lab.Lab, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, n := range l.Plan.Nodes {
		fmt.Fprintf(&b, "== %s\n", n.ID)
		for _, argv := range [][]string{
			{"ip", "-n", n.Netns, "-br", "link"},
			{"ip", "-n", n.Netns, "-br", "addr"},
			{"ip", "-n", n.Netns, "route"},
			{"ip", "netns", "exec", n.Netns, "nft", "list", "ruleset"},
			{"ip", "netns", "pids", n.Netns},
		} {
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			if err != nil && argv[0] == "ip" && argv[1] == "-n" {
				t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
			}
			b.WriteString(counters.ReplaceAllString(string(out), ""))
		}
		bpf, err := testenv.BPFAttached(n.Netns)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "bpf:\n%s\n", bpf)
	}
	pins, err := testenv.BPFPins(dir)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := testenv.BPFFileDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "== host\n%s\nheld by the test: %s\n", pins, fds)
	return b.String()
}

// udpThrough sends UDP datagrams from client to target, served by a UDP
// echo server on server at the target's port, and checks that echoes come
// back intact. A loaded host may lose some; none is a failure.
func udpThrough(t *testing.T, l *lab.Lab, bin, server, client, target string) {
	t.Helper()
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := l.Command(context.Background(), server, bin, "load", "udp-server", "--listen", "0.0.0.0:"+port)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	res := filepath.Join(t.TempDir(), "udp.json")
	var r struct{ Sent, Received, Corrupt int }
	// The server may start after the first datagrams: try a few runs.
	for range 10 {
		cmd, err := l.Command(context.Background(), client, bin, "load", "udp", "--addr", target,
			"--rate", "200", "--duration", "1s", "--size", "1400", "--timeout", "2s", "--json", res)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := cmd.CombinedOutput()
		if err := readJSONFile(res, &r); err != nil {
			t.Fatalf("load udp through %s: %v\n%s", target, err, out)
		}
		if r.Corrupt != 0 {
			t.Fatalf("UDP through %s: %d corrupt echoes\n%s", target, r.Corrupt, out)
		}
		if r.Received > 0 {
			return
		}
	}
	t.Fatalf("UDP through %s: no echo of %d datagrams", target, r.Sent)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
