package tool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/lab/nexthop"
	"github.com/strait-net/strait/lab/topology"
)

func init() {
	Register("strait", func() Tool { return &straitTool{} })
	// The gateways' WAN congestion control held fixed instead of the
	// default's choice, to compare the choices in one run (README,
	// "Performance").
	Register("strait-cubic", func() Tool { return &straitTool{congestion: "cubic"} })
	Register("strait-bbr", func() Tool { return &straitTool{congestion: "bbr"} })
	// The same gateways with the packet mode agreed between them
	// (docs/packet.md, "The gateway"; straitpacket.go).
	Register("strait-packet", func() Tool { return &straitTool{packet: &straitPacket{}} })
	// The same gateways with their sessions over QUIC instead of TLS over
	// TCP (gateway.Config.Transport); UDP flows ride
	// its streams as they ride the TLS sessions', so it carries what
	// strait carries.
	Register("strait-quic", func() Tool { return &straitTool{transport: gateway.TransportQUIC} })
}

const (
	// GatewayPort is where strait gateways listen for each other in the lab.
	GatewayPort = 4443
	// healthPort is where gateways answer health probes (UDP).
	healthPort = 4444
)

// ImportVIP is the address a client dials when its cluster has several
// gateways: every importing gateway listens on it, and the client node
// reaches it through a resilient nexthop group over its links to them.
var ImportVIP = netip.MustParseAddr("10.96.0.50")

// straitTool runs a strait gateway on every gateway node of the server's
// cluster and of the client's. The server's gateways export every
// workload. With one gateway in the client's cluster it imports each
// workload on its own node address; with several, every one of them imports
// on ImportVIP, and `strait lab nexthop-watch` on the client node spreads
// the client's connections over them with a resilient nexthop group and
// drops a dead one. The watcher only edits the client node's routes and
// carries no traffic, so the placement rule (data plane on gateway nodes
// only) holds.
type straitTool struct {
	congestion string        // the gateways' congestion setting; "" is their default
	transport  string        // the gateways' transport setting; "" is their default (TLS)
	packet     *straitPacket // the packet mode's setup, nil for streams
	procs      processes     // the watcher
	mu         sync.Mutex
	gws        map[string]*gatewayProc // by node ID
	env        Env
	sockDir    string // short directory for admin sockets when Env.Dir is too deep for one
}

// gatewayProc is one gateway process, which an experiment may kill and
// restart.
type gatewayProc struct {
	node   *topology.PlanNode
	argv   []string
	log    string
	socket string // admin socket
	cmd    *exec.Cmd
	done   chan struct{}
}

func (t *straitTool) Name() string {
	switch {
	case t.packet != nil:
		return "strait-packet"
	case t.transport != "":
		return "strait-" + t.transport
	case t.congestion != "":
		return "strait-" + t.congestion
	}
	return "strait"
}

func (t *straitTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	if env.Server.Cluster == env.Client.Cluster {
		return nil, fmt.Errorf("strait connects clusters: server and client are both in cluster %s", env.Server.Cluster)
	}
	t.env = env
	exportGWs := env.Lab.Plan.Gateways(env.Server.Cluster)
	importGWs := env.Lab.Plan.Gateways(env.Client.Cluster)
	if len(exportGWs) == 0 || len(importGWs) == 0 {
		return nil, fmt.Errorf("clusters %s and %s need a gateway node each", env.Server.Cluster, env.Client.Cluster)
	}
	fabricDir := filepath.Join(env.Dir, "fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fabricDir, "--clusterset", env.Lab.Plan.Name, "--force"},
		{"fabric", "issue", env.Server.Cluster, "--dir", fabricDir},
		{"fabric", "issue", env.Client.Cluster, "--dir", fabricDir},
	} {
		if out, err := exec.CommandContext(ctx, env.Binary, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("strait %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	wanAddrs := func(gws []*topology.PlanNode) []string {
		var out []string
		for _, g := range gws {
			out = append(out, net.JoinHostPort(g.Addr.String(), strconv.Itoa(GatewayPort)))
		}
		return out
	}
	importIP := importGWs[0].Addr
	if len(importGWs) > 1 || t.packet != nil {
		importIP = ImportVIP
	}

	var exportRes, importRes strings.Builder
	writePeer(&exportRes, env.Client.Cluster, wanAddrs(importGWs))
	writePeer(&importRes, env.Server.Cluster, wanAddrs(exportGWs))
	targets := map[string]string{}
	for _, s := range env.Services {
		fmt.Fprintf(&exportRes, `---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: %s, namespace: default}
spec: {target: "%s"}
`, s.Name, net.JoinHostPort(env.Server.Addr.String(), strconv.Itoa(s.Port)))
		fmt.Fprintf(&importRes, `---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: %s, namespace: default}
spec:
  type: ClusterSetIP
  ips: [%s]
  ports: [{name: tcp, protocol: TCP, port: %d}, {name: udp, protocol: UDP, port: %d}]
  clusters: [{cluster: %s}]
`, s.Name, importIP, s.Port, s.Port, env.Server.Cluster)
		targets[s.Name] = net.JoinHostPort(importIP.String(), strconv.Itoa(s.Port))
	}
	// The lab measures the data path; access control is exercised by the
	// gateway's own tests. Both ends still evaluate this policy per stream.
	const allowAll = `---
apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: allow-all}
spec: {priority: 1000, action: allow}
`
	exportRes.WriteString(allowAll)
	importRes.WriteString(allowAll)

	if t.packet != nil {
		if err := t.packet.setup(ctx, env, exportGWs, importGWs); err != nil {
			return nil, err
		}
	} else if len(importGWs) > 1 {
		for _, g := range importGWs {
			if err := t.run(ctx, g, "ip", "addr", "add", ImportVIP.String()+"/32", "dev", "lo"); err != nil {
				return nil, err
			}
		}
	}
	t.gws = map[string]*gatewayProc{}
	var sockets []string
	for _, side := range []struct {
		gws       []*topology.PlanNode
		resources string
		importing bool
		peer      string
	}{{exportGWs, exportRes.String(), false, env.Client.Cluster}, {importGWs, importRes.String(), true, env.Server.Cluster}} {
		for _, node := range side.gws {
			name := node.Cluster + "-" + node.Name
			resFile := filepath.Join(env.Dir, name+"-resources.yaml")
			if err := os.WriteFile(resFile, []byte(side.resources), 0o644); err != nil {
				return nil, err
			}
			socket, err := t.socketPath(env, name)
			if err != nil {
				return nil, err
			}
			cfg := fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nresources: [%s]\nmetrics: %s\n",
				node.Cluster, fabricDir, net.JoinHostPort(node.Addr.String(), strconv.Itoa(GatewayPort)), socket,
				filepath.Join(env.Dir, name+"-state.json"), resFile, MetricsAddr(node))
			if t.congestion != "" {
				cfg += "congestion: " + t.congestion + "\n"
			}
			if t.transport != "" {
				cfg += "transport: " + t.transport + "\n"
			}
			if t.packet != nil {
				pc, err := t.packet.config(env, node, side.peer)
				if err != nil {
					return nil, err
				}
				cfg += pc
			}
			if side.importing {
				sockets = append(sockets, socket)
				if len(importGWs) > 1 {
					cfg += fmt.Sprintf("health: %s\n", net.JoinHostPort(node.Addr.String(), strconv.Itoa(healthPort)))
				} else {
					cfg += fmt.Sprintf("dns: %s\n", net.JoinHostPort(node.Addr.String(), "53"))
				}
			}
			cfgFile := filepath.Join(env.Dir, name+"-gateway.yaml")
			if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
				return nil, err
			}
			gp := &gatewayProc{node: node, argv: []string{env.Binary, "gateway", "--config", cfgFile}, log: filepath.Join(env.Dir, name+"-gateway.log"), socket: socket}
			t.gws[node.ID] = gp
			if err := t.start(ctx, gp); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range sockets {
		if err := waitReady(ctx, s, env.Server.Cluster, len(env.Services)); err != nil {
			return nil, fmt.Errorf("%w (logs in %s)", err, env.Dir)
		}
	}
	if t.packet != nil {
		for _, side := range []struct {
			gws       []*topology.PlanNode
			peer      string
			importing bool
		}{{importGWs, env.Server.Cluster, true}, {exportGWs, env.Client.Cluster, false}} {
			for _, g := range side.gws {
				if err := waitActive(ctx, t.gws[g.ID].socket, side.peer, side.importing); err != nil {
					return nil, fmt.Errorf("%s: %w (logs in %s)", g.ID, err, env.Dir)
				}
			}
		}
	}
	if len(importGWs) > 1 {
		members, _, err := nexthop.LabMembers(env.Lab.Plan, env.Client.ID, healthPort)
		if err != nil {
			return nil, err
		}
		if t.packet != nil {
			for i := range members {
				members[i].Health = t.packet.healthTarget(members[i].Via)
			}
		}
		argv := []string{env.Binary, "lab", "nexthop-watch", "--route", ImportVIP.String() + "/32", "--src", env.Client.Addr.String()}
		for _, m := range members {
			argv = append(argv, "--member", fmt.Sprintf("%s,%s,%s", m.Via, m.Dev, m.Health))
		}
		if err := t.procs.start(ctx, env, env.Client, filepath.Join(env.Dir, "nexthop-watch.log"), argv...); err != nil {
			return nil, err
		}
		if err := t.waitRoute(ctx, len(members)); err != nil {
			return nil, fmt.Errorf("%w (logs in %s)", err, env.Dir)
		}
	}
	if t.packet != nil && len(env.Services) > 0 {
		if err := t.packet.check(ctx, env, exportGWs, importGWs, targets[env.Services[0].Name]); err != nil {
			return nil, fmt.Errorf("packet mode check: %w", err)
		}
	}
	return targets, nil
}

// MetricsAddr is where the lab's strait gateway on node serves Prometheus
// metrics.
func MetricsAddr(node *topology.PlanNode) string {
	return net.JoinHostPort(node.Addr.String(), "9464")
}

// waitRoute waits until the client node routes ImportVIP through a group of
// all n gateways.
func (t *straitTool) waitRoute(ctx context.Context, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cmd, err := t.env.Lab.Command(ctx, t.env.Client.ID, "ip", "nexthop", "show", "id", "100")
		if err != nil {
			return err
		}
		out, _ := cmd.Output()
		if g, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "id 100 group "); ok && strings.Count(strings.Fields(g)[0], "/") == n-1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("client %s: nexthop group of %d gateways not installed after 10s", t.env.Client.ID, n)
}

func (t *straitTool) run(ctx context.Context, node *topology.PlanNode, argv ...string) error {
	cmd, err := t.env.Lab.Command(ctx, node.ID, argv...)
	if err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s on %s: %w: %s", strings.Join(argv, " "), node.ID, err, out)
	}
	return nil
}

func (t *straitTool) start(ctx context.Context, gp *gatewayProc) error {
	logf, err := os.OpenFile(gp.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd, err := t.env.Lab.Command(context.WithoutCancel(ctx), gp.node.ID, gp.argv...)
	if err != nil {
		logf.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start gateway on %s: %w", gp.node.ID, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	gp.cmd, gp.done = cmd, done
	return nil
}

// Gateways lists the node IDs running a gateway, for experiments that kill
// and restart them.
func (t *straitTool) Gateways() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []string
	for id := range t.gws {
		ids = append(ids, id)
	}
	return ids
}

// Kill ends the gateway on node with SIGKILL: nothing is flushed, no
// GOAWAY is sent, as when a gateway crashes.
func (t *straitTool) Kill(node string) error {
	t.mu.Lock()
	gp, ok := t.gws[node]
	t.mu.Unlock()
	if !ok || gp.cmd == nil {
		return fmt.Errorf("kill: no strait gateway on %s", node)
	}
	_ = gp.cmd.Process.Signal(syscall.SIGKILL)
	<-gp.done
	return nil
}

// Restart starts the gateway on node again with its configuration and
// waits until it answers on its admin socket.
func (t *straitTool) Restart(ctx context.Context, node string) error {
	t.mu.Lock()
	gp, ok := t.gws[node]
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("restart: no strait gateway on %s", node)
	}
	select {
	case <-gp.done:
	default:
		return fmt.Errorf("restart: the gateway on %s is still running", node)
	}
	return t.start(ctx, gp)
}

func writePeer(b *strings.Builder, cluster string, addrs []string) {
	fmt.Fprintf(b, `apiVersion: strait.dev/v1alpha1
kind: Peer
metadata: {name: %s}
spec: {gateways: ["%s"]}
`, cluster, strings.Join(addrs, `", "`))
}

// waitReady waits until the importing gateway has a live session to the
// exporting cluster and listens on every import.
func waitReady(ctx context.Context, socket, peer string, imports int) error {
	client := gateway.NewAdminClient(socket)
	defer client.Close()
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		st, err := client.Status()
		switch {
		case err != nil:
			last = err
		case len(st.Imports) < imports:
			last = fmt.Errorf("%d of %d imports listening", len(st.Imports), imports)
		default:
			for _, p := range st.Peers {
				if p.Cluster == peer && len(p.Live) == len(p.Addrs) {
					return nil
				}
			}
			last = fmt.Errorf("not every gateway of cluster %s is live", peer)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("gateways not ready after 20s: %w", last)
}

func (t *straitTool) Teardown(ctx context.Context) error {
	t.mu.Lock()
	gws := t.gws
	t.gws = nil
	t.mu.Unlock()
	var errs []error
	for _, gp := range gws {
		if gp.cmd == nil {
			continue
		}
		select {
		case <-gp.done:
			continue
		default:
		}
		_ = gp.cmd.Process.Signal(os.Interrupt)
		select {
		case <-gp.done:
		case <-time.After(5 * time.Second):
			_ = gp.cmd.Process.Kill()
			<-gp.done
			errs = append(errs, fmt.Errorf("gateway on %s (pid %d) did not stop in 5s", gp.node.ID, gp.cmd.Process.Pid))
		}
	}
	errs = append(errs, t.procs.stop())
	if t.packet != nil {
		errs = append(errs, t.packet.teardown(ctx, t.env))
	}
	if t.sockDir != "" {
		errs = append(errs, os.RemoveAll(t.sockDir))
		t.sockDir = ""
	}
	return errors.Join(errs...)
}

func (*straitTool) Version(ctx context.Context) string {
	exe, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	out, err := exec.CommandContext(ctx, exe, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// GatewayController is implemented by tools whose gateway processes an
// experiment may kill and restart (the strait tool).
type GatewayController interface {
	// Gateways lists the node IDs that run a gateway.
	Gateways() []string
	// Kill ends the gateway on a node with SIGKILL and waits for it.
	Kill(node string) error
	// Restart starts a killed gateway again with its configuration.
	Restart(ctx context.Context, node string) error
	// AdminSocket is the gateway's admin socket on the host.
	AdminSocket(node string) string
}

func (t *straitTool) AdminSocket(node string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	gp, ok := t.gws[node]
	if !ok {
		return ""
	}
	return gp.socket
}

// socketPath is where gateway name's admin socket goes: in the run
// directory beside its log, unless that path would not fit a Unix socket
// address (a deep --out), then in a short temporary directory that
// Teardown removes.
func (t *straitTool) socketPath(env Env, name string) (string, error) {
	if p := filepath.Join(env.Dir, name+".sock"); len(p) <= gateway.MaxSocketPath {
		return p, nil
	}
	if t.sockDir == "" {
		dir, err := os.MkdirTemp("", "strait-admin-")
		if err != nil {
			return "", err
		}
		t.sockDir = dir
	}
	return filepath.Join(t.sockDir, name+".sock"), nil
}

// straitCarries lists what strait's gateways carry: TCP connections and
// UDP flows of import ports (every lab service is imported on both), not
// ICMP. The README's "Tools" section says so too.
var straitCarries = map[Protocol]bool{TCP: true, UDP: true}

// Carries reports whether strait's gateways carry proto.
func (*straitTool) Carries(proto Protocol) bool { return straitCarries[proto] }

// Processes are the running gateways, in node order, and the nexthop
// watcher when there is one.
func (t *straitTool) Processes() []Process {
	t.mu.Lock()
	var out []Process
	for id, gp := range t.gws {
		select {
		case <-gp.done:
			continue // killed by an experiment
		default:
		}
		if gp.cmd != nil && gp.cmd.Process != nil {
			out = append(out, Process{Name: "gateway", Node: id, PID: gp.cmd.Process.Pid})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Process) int { return strings.Compare(a.Node, b.Node) })
	return append(out, t.procs.list()...)
}
