package tool

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

func init() {
	Register("wireguard", func() Tool {
		t := &wireguardTool{name: "wireguard"}
		t.binary = func() (string, error) { return moduleWireguardGo(t.strait) }
		return t
	})
	Register("wireguard-debian", func() Tool {
		return &wireguardTool{name: "wireguard-debian", binary: func() (string, error) { return exec.LookPath("wireguard-go") }}
	})
}

// wireguardPort is the UDP port of the lab's WireGuard endpoints.
const wireguardPort = "51820"

// wireguardOverhead is what WireGuard adds to a packet over IPv6 (40 bytes
// of IPv6, 8 of UDP, 32 of WireGuard), the overhead wg-quick assumes.
const wireguardOverhead = 80

// wireguardModule is the Go module of wireguard-go; strait's link emulator
// uses its tun package, so go.mod pins the version the lab runs too.
const wireguardModule = "golang.zx2c4.com/wireguard"

// moduleWireguardGo returns the wireguard-go that scripts/setup.sh builds
// from the module version go.mod pins. That version offloads segmentation
// on the TUN device (virtio-net headers, GSO/GRO), batches UDP with GSO/GRO
// and asks for 7 MiB socket buffers; Debian's 0.0.20220316 does none of
// these, and in a lab namespace (whose net.core.rmem_default cannot be
// raised) its 208 KiB receive buffer overflows (UdpRcvbufErrors equal to
// TCP's retransmissions): 0.24–0.34 Gbit/s single stream against 0.75–1.5
// for the module's build on the same lab, which dropped nothing.
func moduleWireguardGo(strait string) (string, error) {
	version := wireguardModuleVersion(strait)
	if version == "" {
		return "", fmt.Errorf("this binary was built without module information for %s", wireguardModule)
	}
	path := filepath.Join("/var/cache/strait", "wireguard-go-"+version, "wireguard-go")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("wireguard-go %s not built (scripts/setup.sh builds it): %w", version, err)
	}
	return path, nil
}

// wireguardModuleVersion reads the module's version from the build
// information of the strait binary the lab runs (a test binary records no
// dependencies), or of this executable when none is known yet.
func wireguardModuleVersion(strait string) string {
	info, ok := debug.ReadBuildInfo()
	if strait != "" {
		var err error
		info, err = buildinfo.ReadFile(strait)
		ok = err == nil
	}
	if !ok {
		return ""
	}
	for _, m := range info.Deps {
		if m.Path == wireguardModule {
			if m.Replace != nil {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return ""
}

// wireguardTool stands for Submariner's WireGuard cable driver: an
// encrypted layer-3 tunnel between the two clusters' gateway nodes, with
// the client's and the server's addresses routed through it. This kernel
// has no WireGuard module, so it runs wireguard-go, the userspace
// implementation, which is slower than kernel WireGuard: "wireguard" runs
// the current wireguard-go built from its module, "wireguard-debian"
// Debian's packaged one.
type wireguardTool struct {
	name    string
	binary  func() (string, error)
	strait  string // the lab's strait binary, whose go.mod pins wireguard-go
	procs   processes
	changes changes
}

func (t *wireguardTool) Name() string { return t.name }

func (t *wireguardTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	t.strait = env.Binary
	bin, err := t.binary()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.name, err)
	}
	serverGW, clientGW, err := gatewayPair(env, t.name)
	if err != nil {
		return nil, err
	}
	type end struct {
		gw     *topology.PlanNode
		behind *topology.PlanNode // the node whose traffic the tunnel carries
		key    string             // private key file
		pub    string
		ifname string
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
		// wireguard-go keeps its control sockets in one host-wide directory,
		// /var/run/wireguard, so the name must be unique across namespaces.
		e.ifname = deviceName("wg", e.gw.Netns)
	}
	for i, e := range ends {
		peer := ends[1-i]
		logFile := filepath.Join(env.Dir, e.gw.Cluster+"-wireguard-go.log")
		if err := t.procs.start(ctx, env, e.gw, logFile, bin, "-f", e.ifname); err != nil {
			return nil, err
		}
		if err := waitLink(ctx, e.gw, e.ifname, 2*time.Second); err != nil {
			return nil, fmt.Errorf("wireguard-go: %w (see %s)", err, logFile)
		}
		// wireguard-go opens its control socket after the device: `wg
		// set` before it exists falls back to netlink and fails with
		// "Protocol not supported" (seen on a host at load 20).
		if err := waitFile(ctx, filepath.Join("/var/run/wireguard", e.ifname+".sock"), 5*time.Second); err != nil {
			return nil, fmt.Errorf("wireguard-go: %w (see %s)", err, logFile)
		}
		if err := t.changes.run(ctx, nil, "ip", "netns", "exec", e.gw.Netns, "wg", "set", e.ifname,
			"private-key", e.key, "listen-port", wireguardPort,
			"peer", peer.pub, "endpoint", peer.gw.Addr.String()+":"+wireguardPort,
			"allowed-ips", peer.behind.Addr.String()+"/32"); err != nil {
			return nil, err
		}
		// wireguard-go starts its device at 1420, room for its 80 bytes of
		// outer IPv6, UDP and WireGuard headers on a 1500-byte link; on
		// others the device follows the WAN link's MTU as Submariner's
		// driver must be told to (seed 004).
		mtu := strconv.Itoa(wanMTU(env, serverGW, clientGW) - wireguardOverhead)
		if err := t.changes.run(ctx, nil, "ip", "-n", e.gw.Netns, "link", "set", e.ifname, "mtu", mtu, "up"); err != nil {
			return nil, err
		}
		// Only the measured pair's traffic takes the tunnel; everything
		// else, the tunnel's own UDP included, stays on the WAN link.
		if err := t.changes.replaceRoute(ctx, e.gw, peer.behind.Addr, "dev", e.ifname); err != nil {
			return nil, err
		}
		if err := t.changes.clampMSS(ctx, e.gw, "wireguard", e.ifname); err != nil {
			return nil, err
		}
	}
	if err := probeThrough(ctx, env, clientGW, ends[1].ifname); err != nil {
		return nil, fmt.Errorf("%s health check: %w", t.name, err)
	}
	return serverTargets(env), nil
}

// Teardown stops wireguard-go, which removes its device, then restores the
// routes and removes the MSS clamp.
func (t *wireguardTool) Teardown(ctx context.Context) error {
	return errors.Join(t.procs.stop(), t.changes.revert(ctx))
}

func (t *wireguardTool) Version(ctx context.Context) string {
	bin, err := t.binary()
	if err != nil {
		return "wireguard-go (not found; userspace, no kernel module)"
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "wireguard-go (version unknown; userspace, no kernel module)"
	}
	v := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if t.name == "wireguard" {
		v += fmt.Sprintf(" built from %s@%s (TUN and UDP offloads)", wireguardModule, wireguardModuleVersion(t.strait))
	} else {
		v += " from Debian (no TUN or UDP offloads)"
	}
	return v + "; userspace, this kernel has no WireGuard module"
}

// Carries: a WireGuard tunnel carries any IP traffic.
func (*wireguardTool) Carries(Protocol) bool { return true }

// Processes are the two wireguard-go daemons.
func (t *wireguardTool) Processes() []Process { return t.procs.list() }
