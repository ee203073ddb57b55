package tool

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

type planNode = topology.PlanNode

// changes records what a tool changed in the lab's namespaces besides its
// processes — routes, devices, firewall tables, sysctls — and how to undo
// each, so that Teardown leaves every namespace as the lab built it and the
// next tool in the same lab starts from the same state.
type changes struct {
	undo [][]string // commands, undone last first
}

// run runs argv and, when it succeeds, remembers undo (if any) for revert.
func (c *changes) run(ctx context.Context, undo []string, argv ...string) error {
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	if undo != nil {
		c.undo = append(c.undo, undo)
	}
	return nil
}

// revert undoes every change, newest first. It is safe to call more than
// once: a change is forgotten once undone.
func (c *changes) revert(ctx context.Context) error {
	var errs []error
	for i := len(c.undo) - 1; i >= 0; i-- {
		u := c.undo[i]
		if out, err := exec.CommandContext(ctx, u[0], u[1:]...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w: %s", strings.Join(u, " "), err, strings.TrimSpace(string(out))))
		}
	}
	c.undo = nil
	return errors.Join(errs...)
}

// replaceRoute replaces node's route to dst/32 with one built from spec
// (e.g. "dev wg0"), and restores the lab's route on revert. The lab gives
// every node a /32 route to every other node, so there is always one to
// save; without one, revert deletes the new route.
func (c *changes) replaceRoute(ctx context.Context, node *topology.PlanNode, dst netip.Addr, spec ...string) error {
	prefix := dst.String() + "/32"
	out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "route", "show", "exact", prefix).Output()
	if err != nil {
		return fmt.Errorf("ip -n %s route show %s: %w", node.Netns, prefix, err)
	}
	undo := []string{"ip", "-n", node.Netns, "route", "del", prefix}
	if saved := strings.Fields(strings.TrimSpace(string(out))); len(saved) > 0 {
		// The listing starts with the destination: "10.200.1.2 via … dev …".
		undo = append([]string{"ip", "-n", node.Netns, "route", "replace", prefix}, saved[1:]...)
	}
	return c.run(ctx, undo, append([]string{"ip", "-n", node.Netns, "route", "replace", prefix}, spec...)...)
}

// amendRoute adds attributes (e.g. "congctl", "bbr") to node's route to
// dst/32 and restores the route as it was on revert.
func (c *changes) amendRoute(ctx context.Context, node *planNode, dst netip.Addr, attrs ...string) error {
	prefix := dst.String() + "/32"
	out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "route", "show", "exact", prefix).Output()
	if err != nil {
		return fmt.Errorf("ip -n %s route show %s: %w", node.Netns, prefix, err)
	}
	saved := strings.Fields(strings.TrimSpace(string(out)))
	if len(saved) < 2 {
		return fmt.Errorf("%s has no route to %s to amend", node.ID, prefix)
	}
	undo := append([]string{"ip", "-n", node.Netns, "route", "replace", prefix}, saved[1:]...)
	argv := append(append([]string{"ip", "-n", node.Netns, "route", "replace", prefix}, saved[1:]...), attrs...)
	return c.run(ctx, undo, argv...)
}

// clampMSS clamps the MSS of TCP connections forwarded out of ifname to the
// route's MTU, as Submariner does on its cable interfaces: the endpoints
// see 1500-byte links and would otherwise depend on path MTU discovery
// through the tunnel. The table is named after the tool and removed on
// revert.
func (c *changes) clampMSS(ctx context.Context, node *topology.PlanNode, toolName, ifname string) error {
	table := "strait-" + toolName
	rule := fmt.Sprintf("add table inet %s { chain forward { type filter hook forward priority mangle; oifname %s tcp flags syn tcp option maxseg size set rt mtu; }; }", table, ifname)
	return c.run(ctx, []string{"ip", "netns", "exec", node.Netns, "nft", "delete", "table", "inet", table},
		"ip", "netns", "exec", node.Netns, "nft", rule)
}

// linkCounters are a device's packet counters.
type linkCounters struct{ rx, tx uint64 }

func readCounters(ctx context.Context, node *topology.PlanNode, ifname string) (linkCounters, error) {
	var c linkCounters
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"rx_packets", &c.rx}, {"tx_packets", &c.tx}} {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node.Netns, "cat", "/sys/class/net/"+ifname+"/statistics/"+f.name).Output()
		if err != nil {
			return c, fmt.Errorf("%s counters on %s: %w", ifname, node.ID, err)
		}
		if *f.v, err = strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64); err != nil {
			return c, fmt.Errorf("%s %s on %s: %w", ifname, f.name, node.ID, err)
		}
	}
	return c, nil
}

// probeThrough checks that the client reaches the server through the
// tunnel device ifname on the client's gateway node: a ping from the client
// node must be answered, and the device must have carried packets both
// ways meanwhile. A tunnel that is down but leaves plain routing in place
// would answer the ping without the counters moving, so it fails here.
func probeThrough(ctx context.Context, env Env, gw *topology.PlanNode, ifname string) error {
	before, err := readCounters(ctx, gw, ifname)
	if err != nil {
		return err
	}
	var last error
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, "ping", "-c", "1", "-W", "1", "-n", "-q", env.Server.Addr.String())
		if err != nil {
			return err
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			last = fmt.Errorf("ping %s from %s: %w: %s", env.Server.Addr, env.Client.ID, err, strings.TrimSpace(string(out)))
			continue
		}
		after, err := readCounters(ctx, gw, ifname)
		if err != nil {
			return err
		}
		if after.tx > before.tx && after.rx > before.rx {
			return nil
		}
		return fmt.Errorf("ping %s from %s answered, but not through %s on %s (packets tx %d→%d, rx %d→%d)",
			env.Server.Addr, env.Client.ID, ifname, gw.ID, before.tx, after.tx, before.rx, after.rx)
	}
	return fmt.Errorf("no path through %s: %w", ifname, last)
}

// waitLink waits until ifname exists on node, e.g. after starting the
// process that creates it.
func waitLink(ctx context.Context, node *topology.PlanNode, ifname string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifname).Run() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("device %s did not appear on %s within %v", ifname, node.ID, within)
}

// deviceName is a device name unique to the namespace and the tool: some
// tools keep per-device state in host-wide places (wireguard-go's control
// sockets in /var/run/wireguard), so a name unique within one namespace is
// not enough.
func deviceName(prefix, netns string) string {
	return fmt.Sprintf("%s%08x", prefix, fnv32(netns))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// serverTargets are the services at the server node's own address, for
// tools that route rather than proxy.
func serverTargets(env Env) map[string]string {
	targets := make(map[string]string, len(env.Services))
	for _, s := range env.Services {
		targets[s.Name] = netip.AddrPortFrom(env.Server.Addr, uint16(s.Port)).String()
	}
	return targets
}

// wanMTU is the MTU of the link between two gateway nodes, which a tunnel
// between them must fit its packets, headers included, into. Gateways
// joined by no direct link get the topology's default.
func wanMTU(env Env, a, b *topology.PlanNode) int {
	if l, ok := env.Lab.Plan.Link(a.ID, b.ID); ok {
		return l.LinkMTU()
	}
	return topology.DefaultMTU
}

// waitFile waits until path exists, e.g. a daemon's control socket.
func waitFile(ctx context.Context, path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not appear within %v", path, within)
}
