package tool

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/strait-net/strait/lab/topology"
)

func init() { Register("vxlan", func() Tool { return &vxlanTool{} }) }

const (
	// vxlanDevice is the name Submariner gives its cable driver's VTEP.
	vxlanDevice = "vxlan-tunnel"
	vxlanVNI    = "100"
	vxlanPort   = "4789" // IANA's VXLAN port
	// vxlanOverhead is VXLAN's 50 bytes of outer Ethernet, IPv4, UDP and
	// VXLAN headers: the VTEP's MTU is the WAN link's less this, 1450 on
	// 1500-byte links and 8950 on 9000-byte ones, as Submariner's
	// auto-MTU sets it (seed 004).
	vxlanOverhead = 50
)

// vxlanTool stands for Submariner's unencrypted VXLAN cable driver: a
// kernel VXLAN device (a VTEP) on each cluster's gateway node pointing at
// the other one, overlay addresses from the reserved 240.0.0.0/4 space as
// Submariner's VXLAN devices use, and the remote endpoint's address routed
// through the device. No encryption, no userspace process: the cheapest
// tunnel there is.
type vxlanTool struct {
	changes changes
	mtu     int // of the VTEPs
}

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
	t.mtu = wanMTU(env, serverGW, clientGW) - vxlanOverhead
	for i, e := range ends {
		peer := ends[1-i]
		ns := e.gw.Netns
		steps := []struct {
			undo []string
			argv []string
		}{
			{[]string{"ip", "-n", ns, "link", "del", ifname},
				[]string{"ip", "-n", ns, "link", "add", ifname, "mtu", strconv.Itoa(t.mtu), "type", "vxlan", "id", vxlanVNI,
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

func (t *vxlanTool) Version(ctx context.Context) string {
	mtu := "WAN MTU - 50"
	if t.mtu != 0 {
		mtu = strconv.Itoa(t.mtu)
	}
	out, err := exec.CommandContext(ctx, "uname", "-r").Output()
	if err != nil {
		return "kernel vxlan"
	}
	return "kernel vxlan, Linux " + strings.TrimSpace(string(out)) + fmt.Sprintf(" (VNI %s, UDP %s, MTU %s)", vxlanVNI, vxlanPort, mtu)
}

// Carries: a VXLAN tunnel carries any IP traffic.
func (*vxlanTool) Carries(Protocol) bool { return true }

// Processes: none, VXLAN is the kernel's.
func (*vxlanTool) Processes() []Process { return nil }
