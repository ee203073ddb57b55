package tool

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/strait-net/strait/lab/topology"
)

func init() { Register("vxlan", func() Tool { return &vxlanTool{} }) }

const (
	// vxlanDevice is the name Submariner gives its cable driver's VTEP.
	vxlanDevice = "vxlan-tunnel"
	vxlanVNI    = "100"
	vxlanPort   = "4789" // IANA's VXLAN port
	// vxlanMTU leaves room for VXLAN's 50 bytes of outer Ethernet, IPv4,
	// UDP and VXLAN headers on the lab's 1500-byte links.
	vxlanMTU = "1450"
)

// vxlanTool stands for Submariner's unencrypted VXLAN cable driver: a
// kernel VXLAN device (a VTEP) on each cluster's gateway node pointing at
// the other one, overlay addresses from the reserved 240.0.0.0/4 space as
// Submariner's VXLAN devices use, and the remote endpoint's address routed
// through the device. No encryption, no userspace process: the cheapest
// tunnel there is.
type vxlanTool struct{ changes changes }

func (*vxlanTool) Name() string { return "vxlan" }

func (t *vxlanTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	serverGW, clientGW, err := gatewayPair(env, "vxlan")
	if err != nil {
		return nil, err
	}
	type end struct {
		gw, behind *topology.PlanNode
		overlay    string // the device's address in the overlay
	}
	ends := []end{{serverGW, env.Server, "240.0.0.1"}, {clientGW, env.Client, "240.0.0.2"}}
	ifname := vxlanDevice
	for i, e := range ends {
		peer := ends[1-i]
		ns := e.gw.Netns
		steps := []struct {
			undo []string
			argv []string
		}{
			{[]string{"ip", "-n", ns, "link", "del", ifname},
				[]string{"ip", "-n", ns, "link", "add", ifname, "mtu", vxlanMTU, "type", "vxlan", "id", vxlanVNI,
					"local", e.gw.Addr.String(), "remote", peer.gw.Addr.String(), "dstport", vxlanPort}},
			{nil, []string{"ip", "-n", ns, "addr", "add", e.overlay + "/30", "dev", ifname}},
			{nil, []string{"ip", "-n", ns, "link", "set", ifname, "up"}},
		}
		for _, s := range steps {
			if err := t.changes.run(ctx, s.undo, s.argv...); err != nil {
				return nil, err
			}
		}
		if err := t.changes.replaceRoute(ctx, e.gw, peer.behind.Addr, "via", peer.overlay, "dev", ifname); err != nil {
			return nil, err
		}
		if err := t.changes.clampMSS(ctx, e.gw, "vxlan", ifname); err != nil {
			return nil, err
		}
	}
	if err := probeThrough(ctx, env, clientGW, ifname); err != nil {
		return nil, fmt.Errorf("vxlan health check: %w", err)
	}
	return serverTargets(env), nil
}

// Teardown restores the routes and deletes the devices.
func (t *vxlanTool) Teardown(ctx context.Context) error { return t.changes.revert(ctx) }

func (*vxlanTool) Version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "uname", "-r").Output()
	if err != nil {
		return "kernel vxlan"
	}
	return "kernel vxlan, Linux " + strings.TrimSpace(string(out)) + fmt.Sprintf(" (VNI %s, UDP %s, MTU %s)", vxlanVNI, vxlanPort, vxlanMTU)
}
