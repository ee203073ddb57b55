package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

func init() { Register("packet", func() Tool { return &packetTool{} }) }

// The packet tool's addresses, from the reserved 240.0.0.0/4 space (as the
// vxlan tool's overlay) so that they meet no lab addressing: the clusterset
// IP clients dial, and the exporting gateway's SNAT address.
var (
	packetVIP  = netip.MustParseAddr("240.96.0.1")
	packetSNAT = netip.MustParseAddr("240.97.0.1")
)

// packetTool is strait's packet mode (docs/packet.md): eBPF programs on the
// two gateway nodes, attached with `strait packet attach` and configured
// with `strait packet apply`, carry the client's packets inside VXLAN and
// NAT them to the server. No process runs while it carries traffic: the
// programs and maps are pinned in a bpffs the tool mounts for the lab.
type packetTool struct {
	changes changes
	env     Env
	pins    string   // the bpffs mount, "" when not mounted
	gws     []string // node IDs with something attached
}

func (*packetTool) Name() string { return "packet" }

// lanDevice is node's device on its link to other.
func lanDevice(plan *topology.Plan, node, other *topology.PlanNode) (string, error) {
	for _, l := range plan.Links {
		switch {
		case l.A.Node == node.ID && l.B.Node == other.ID:
			return l.A.Device, nil
		case l.B.Node == node.ID && l.A.Node == other.ID:
			return l.B.Device, nil
		}
	}
	return "", fmt.Errorf("packet: %s has no link to %s (the tool attaches on the gateway's link to it)", node.ID, other.ID)
}

// copyRoute gives node a route to dst/32 the way it reaches via/32.
func (c *changes) copyRoute(ctx context.Context, node *topology.PlanNode, via, dst netip.Addr) error {
	out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "route", "show", "exact", via.String()+"/32").Output()
	if err != nil {
		return fmt.Errorf("ip -n %s route show %s: %w", node.Netns, via, err)
	}
	f := strings.Fields(strings.TrimSpace(string(out)))
	if len(f) < 2 {
		return fmt.Errorf("%s has no route to %s to copy", node.ID, via)
	}
	return c.replaceRoute(ctx, node, dst, f[1:]...)
}

func (t *packetTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	t.env = env
	serverGW, clientGW, err := gatewayPair(env, "packet")
	if err != nil {
		return nil, err
	}
	clientLAN, err := lanDevice(env.Lab.Plan, clientGW, env.Client)
	if err != nil {
		return nil, err
	}
	serverLAN, err := lanDevice(env.Lab.Plan, serverGW, env.Server)
	if err != nil {
		return nil, err
	}
	pins, err := mountPins(ctx, env.Dir)
	if err != nil {
		return nil, err
	}
	t.pins = pins

	if err := t.changes.run(ctx, []string{"ip", "-n", serverGW.Netns, "addr", "del", packetSNAT.String() + "/32", "dev", "lo"},
		"ip", "-n", serverGW.Netns, "addr", "add", packetSNAT.String()+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	if err := t.changes.copyRoute(ctx, env.Server, serverGW.Addr, packetSNAT); err != nil {
		return nil, err
	}
	if err := t.changes.copyRoute(ctx, env.Client, clientGW.Addr, packetVIP); err != nil {
		return nil, err
	}

	var imports, exports, policyIn, policyOut strings.Builder
	targets := map[string]string{}
	// Every service on TCP and UDP, as the strait tool imports them: a
	// lab service is a port, and its UDP workloads use the same number.
	id := 0
	for _, s := range env.Services {
		for _, proto := range []string{"TCP", "UDP"} {
			id++
			fmt.Fprintf(&imports, "  - {address: %s, port: %d, protocol: %s, id: %d, cluster: server}\n", packetVIP, s.Port, proto, id)
			fmt.Fprintf(&exports, "  - {address: %s, port: %d, protocol: %s, id: %d, target: %s}\n", packetVIP, s.Port, proto, id,
				netip.AddrPortFrom(env.Server.Addr, uint16(s.Port)))
			fmt.Fprintf(&policyOut, "  - {cluster: 0, service: %d, prefix: 0.0.0.0/0}\n", id)
			fmt.Fprintf(&policyIn, "  - {cluster: 1, service: %d, prefix: 0.0.0.0/0}\n", id)
		}
		targets[s.Name] = netip.AddrPortFrom(packetVIP, uint16(s.Port)).String()
	}
	gws := []struct {
		node       *topology.PlanNode
		lan, state string
		extra      []string
	}{
		{serverGW, serverLAN, "exports:\n" + exports.String() +
			fmt.Sprintf("peers: [{address: %s, cluster: 1}]\npolicy:\n%s", clientGW.Addr, policyIn.String()),
			[]string{"--snat", packetSNAT.String()}},
		{clientGW, clientLAN, fmt.Sprintf("clusters: [{name: server, gateways: {%s: %s}}]\nimports:\n%s", serverGW.Name, serverGW.Addr, imports.String()) +
			fmt.Sprintf("peers: [{address: %s, cluster: 1}]\npolicy:\n%s", serverGW.Addr, policyOut.String()),
			nil},
	}
	// The programs clamp SYNs for the WAN link's MTU, as the vxlan tool's
	// VTEPs follow it: sized for 1500 bytes, a 9000-byte WAN would carry
	// 1500-byte packets (seed004's MTU 9000 scenarios; docs/packet.md,
	// "MTU").
	underlay := strconv.Itoa(wanMTU(env, serverGW, clientGW))
	for _, g := range gws {
		name := packetName(g.node)
		t.gws = append(t.gws, g.node.ID)
		attach := append([]string{env.Binary, "packet", "attach", "--name", name, "--pin-root", pins, "--lan", g.lan,
			"--underlay-mtu", underlay}, g.extra...)
		if err := t.strait(ctx, g.node, nil, attach...); err != nil {
			return nil, err
		}
		if err := t.strait(ctx, g.node, strings.NewReader(g.state),
			env.Binary, "packet", "apply", "--name", name, "--pin-root", pins, "-f", "-"); err != nil {
			return nil, err
		}
	}
	if err := t.healthCheck(ctx, clientGW, serverGW, targets); err != nil {
		return nil, fmt.Errorf("packet health check: %w", err)
	}
	return targets, nil
}

// packetName is a gateway node's name for its pins: unique in the lab.
func packetName(n *topology.PlanNode) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(n.ID))
}

func (t *packetTool) strait(ctx context.Context, node *topology.PlanNode, stdin *strings.Reader, argv ...string) error {
	cmd, err := t.env.Lab.Command(ctx, node.ID, argv...)
	if err != nil {
		return err
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s on %s: %w: %s", strings.Join(argv[1:4], " "), node.ID, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// packetCounters reads the programs' counters pinned on node under pins.
func packetCounters(ctx context.Context, env Env, node *topology.PlanNode, pins string) (map[string]uint64, error) {
	cmd, err := env.Lab.Command(ctx, node.ID, env.Binary, "packet", "counters", "--name", packetName(node), "--pin-root", pins)
	if err != nil {
		return nil, err
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("packet counters on %s: %w", node.ID, err)
	}
	var c map[string]uint64
	if err := json.Unmarshal(out, &c); err != nil {
		return nil, fmt.Errorf("packet counters on %s: %w", node.ID, err)
	}
	return c, nil
}

// healthCheck proves that packets take the BPF path: a TCP connection from
// the client to the first service (HTTP or not) must open, and meanwhile the importing
// program must have sent packets into the tunnel and the exporting one
// translated them (their counters), not some other route.
func (t *packetTool) healthCheck(ctx context.Context, clientGW, serverGW *topology.PlanNode, targets map[string]string) error {
	if len(t.env.Services) == 0 {
		return nil
	}
	target := targets[t.env.Services[0].Name]
	beforeC, err := packetCounters(ctx, t.env, clientGW, t.pins)
	if err != nil {
		return err
	}
	beforeS, err := packetCounters(ctx, t.env, serverGW, t.pins)
	if err != nil {
		return err
	}
	if err := connectThrough(ctx, t.env, target); err != nil {
		return err
	}
	afterC, err := packetCounters(ctx, t.env, clientGW, t.pins)
	if err != nil {
		return err
	}
	afterS, err := packetCounters(ctx, t.env, serverGW, t.pins)
	if err != nil {
		return err
	}
	if afterC["import_tx_packets"] > beforeC["import_tx_packets"] && afterS["export_rx_packets"] > beforeS["export_rx_packets"] &&
		afterC["reply_rx_packets"] > beforeC["reply_rx_packets"] {
		return nil
	}
	return fmt.Errorf("%s answered, but the programs' counters did not move (client gateway %v, server gateway %v)", target, afterC, afterS)
}

// connectThrough opens TCP connections from the client node to target
// (address:port) until one opens, for at most 15 s. It only connects and
// closes: a request in a protocol the service does not speak would
// disturb it (iperf3's server reads an HTTP request as a test's cookie and
// then fails the next client's test). The caller's counters say along
// which path the connection went.
func connectThrough(ctx context.Context, env Env, target string) error {
	addr, err := netip.ParseAddrPort(target)
	if err != nil {
		return fmt.Errorf("connect check: target %q: %w", target, err)
	}
	dial := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", addr.Addr(), addr.Port())
	var last error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, "timeout", "2", "bash", "-c", dial)
		if err != nil {
			return err
		}
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("connect to %s from %s: %w: %s", target, env.Client.ID, err, strings.TrimSpace(string(out)))
	}
	return last
}

// Teardown detaches and unpins everything, restores routes and addresses
// and unmounts the tool's bpffs; it then checks that no pin is left.
func (t *packetTool) Teardown(ctx context.Context) error {
	var errs []error
	for _, id := range t.gws {
		node, ok := t.env.Lab.Plan.Node(id)
		if !ok {
			continue
		}
		if err := t.strait(ctx, node, nil, t.env.Binary, "packet", "teardown", "--name", packetName(node), "--pin-root", t.pins); err != nil {
			errs = append(errs, err)
		}
	}
	t.gws = nil
	if err := t.changes.revert(ctx); err != nil {
		errs = append(errs, err)
	}
	if t.pins != "" {
		unmounted, err := unmountPins(ctx, t.pins)
		if unmounted {
			t.pins = ""
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (*packetTool) Version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "uname", "-r").Output()
	if err != nil {
		return "strait packet mode (tcx, kernel VXLAN)"
	}
	return "strait packet mode (tcx, kernel VXLAN), Linux " + strings.TrimSpace(string(out))
}

// Carries: the tool programs every service as a TCP and a UDP import. ICMP
// errors about those flows are translated, but ICMP itself (ping) is not
// a service.
func (*packetTool) Carries(proto Protocol) bool { return proto == TCP || proto == UDP }

// Processes: none, the data plane is the kernel's programs.
func (*packetTool) Processes() []Process { return nil }
