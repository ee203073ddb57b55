package tool

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

func init() { Register("wireguard", func() Tool { return &wireguardTool{} }) }

// wireguardPort is the UDP port of the lab's WireGuard endpoints.
const wireguardPort = "51820"

// wireguardTool stands for Submariner's WireGuard cable driver: an
// encrypted layer-3 tunnel between the two clusters' gateway nodes, with
// the client's and the server's addresses routed through it. This kernel
// has no WireGuard module, so it runs wireguard-go (Debian's userspace
// implementation), which is slower than kernel WireGuard; Version says so.
type wireguardTool struct{ procs processes }

func (*wireguardTool) Name() string { return "wireguard" }

// wgInterface names a namespace's WireGuard device. wireguard-go keeps its
// control sockets in one host-wide directory, /var/run/wireguard, so the
// name must be unique across namespaces, not only within one.
func wgInterface(netns string) string {
	h := fnv.New32a()
	h.Write([]byte(netns))
	return fmt.Sprintf("wg%08x", h.Sum32())
}

func (t *wireguardTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	serverGW, clientGW, err := gatewayPair(env, "wireguard")
	if err != nil {
		return nil, err
	}
	type end struct {
		gw     *topology.PlanNode
		behind *topology.PlanNode // the node whose traffic the tunnel carries
		key    string             // private key file
		pub    string
	}
	ends := []*end{{gw: serverGW, behind: env.Server}, {gw: clientGW, behind: env.Client}}
	for _, e := range ends {
		priv, err := exec.CommandContext(ctx, "wg", "genkey").Output()
		if err != nil {
			return nil, fmt.Errorf("wg genkey: %w", err)
		}
		e.key = filepath.Join(env.Dir, e.gw.Cluster+".key")
		if err := os.WriteFile(e.key, priv, 0o600); err != nil {
			return nil, err
		}
		pubCmd := exec.CommandContext(ctx, "wg", "pubkey")
		pubCmd.Stdin = strings.NewReader(string(priv))
		pub, err := pubCmd.Output()
		if err != nil {
			return nil, fmt.Errorf("wg pubkey: %w", err)
		}
		e.pub = strings.TrimSpace(string(pub))
	}
	for i, e := range ends {
		peer := ends[1-i]
		ifname := wgInterface(e.gw.Netns)
		if err := t.start(ctx, env, e.gw, ifname); err != nil {
			return nil, err
		}
		steps := [][]string{
			{"ip", "netns", "exec", e.gw.Netns, "wg", "set", ifname, "private-key", e.key, "listen-port", wireguardPort,
				"peer", peer.pub, "endpoint", peer.gw.Addr.String() + ":" + wireguardPort,
				"allowed-ips", peer.behind.Addr.String() + "/32"},
			{"ip", "-n", e.gw.Netns, "link", "set", ifname, "up"},
			// Only the measured pair's traffic takes the tunnel; everything
			// else, the tunnel's own UDP included, stays on the WAN link.
			{"ip", "-n", e.gw.Netns, "route", "replace", peer.behind.Addr.String() + "/32", "dev", ifname},
			// Clamp TCP's MSS to the tunnel's MTU, as Submariner does: the
			// endpoints see 1500-byte links and would otherwise depend on
			// path MTU discovery through the tunnel.
			{"ip", "netns", "exec", e.gw.Netns, "nft", "add table inet strait-wg { chain forward { type filter hook forward priority mangle; oifname " +
				ifname + " tcp flags syn tcp option maxseg size set rt mtu; }; }"},
		}
		for _, s := range steps {
			if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
			}
		}
	}
	targets := map[string]string{}
	for _, s := range env.Services {
		targets[s.Name] = fmt.Sprintf("%s:%d", env.Server.Addr, s.Port)
	}
	return targets, nil
}

// start runs wireguard-go in the foreground on node and waits for its
// device.
func (t *wireguardTool) start(ctx context.Context, env Env, node *topology.PlanNode, ifname string) error {
	logFile := filepath.Join(env.Dir, node.Cluster+"-wireguard-go.log")
	if err := t.procs.start(ctx, env, node, logFile, "wireguard-go", "-f", ifname); err != nil {
		return err
	}
	for i := 0; i < 200; i++ {
		if exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifname).Run() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("wireguard-go on %s: device %s did not appear (see %s)", node.ID, ifname, logFile)
}

func (t *wireguardTool) Teardown(context.Context) error { return t.procs.stop() }

func (*wireguardTool) Version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "wireguard-go", "--version").CombinedOutput()
	if err != nil {
		return "wireguard-go (version unknown; userspace, no kernel module)"
	}
	return strings.TrimSpace(string(out)) + " (userspace; this kernel has no WireGuard module)"
}
