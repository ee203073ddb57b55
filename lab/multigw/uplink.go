package multigw

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/strait-net/strait/lab/topology"
)

// uplink is a gateway node's end of its only WAN link, its uplink to
// wan/core (see Experiment.Topology).
func uplink(plan *topology.Plan, node string) (topology.LinkEnd, error) {
	for _, l := range plan.Links {
		if l.Class != topology.WAN {
			continue
		}
		if l.A.Node == node {
			return l.A, nil
		}
		if l.B.Node == node {
			return l.B, nil
		}
	}
	return topology.LinkEnd{}, fmt.Errorf("find %s's uplink: no WAN link of lab %s ends at it", node, plan.Name)
}

// uplinkDown sets node's uplink device administratively down in its
// namespace, as a dead NIC or a pulled cable looks to the node (the other
// end loses its carrier), and returns what brings it back. Setting a
// device down deletes the routes through it, which setting it up does not
// bring back but for the device's own prefix: the routes are read before
// and put back after, or the node would stay cut off.
func uplinkDown(ctx context.Context, plan *topology.Plan, node string) (up func(context.Context) error, err error) {
	end, err := uplink(plan, node)
	if err != nil {
		return nil, err
	}
	out, err := ip(ctx, end.Netns, "-o", "route", "show", "dev", end.Device)
	if err != nil {
		return nil, fmt.Errorf("list routes on %s's uplink %s in netns %q: %w", node, end.Device, end.Netns, err)
	}
	var routes [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// Flags the kernel shows but takes from no command.
		f := slices.DeleteFunc(strings.Fields(line), func(s string) bool { return s == "linkdown" || s == "dead" })
		if len(f) > 0 {
			routes = append(routes, f)
		}
	}
	if _, err := ip(ctx, end.Netns, "link", "set", end.Device, "down"); err != nil {
		return nil, fmt.Errorf("set %s's uplink %s down in netns %q: %w", node, end.Device, end.Netns, err)
	}
	return func(ctx context.Context) error {
		if _, err := ip(ctx, end.Netns, "link", "set", end.Device, "up"); err != nil {
			return fmt.Errorf("set %s's uplink %s up in netns %q: %w", node, end.Device, end.Netns, err)
		}
		for _, r := range routes {
			argv := append(append([]string{"route", "replace"}, r...), "dev", end.Device)
			if _, err := ip(ctx, end.Netns, argv...); err != nil {
				return fmt.Errorf("put back route %q on %s's uplink %s in netns %q: %w", strings.Join(r, " "), node, end.Device, end.Netns, err)
			}
		}
		return nil
	}, nil
}

// ip runs ip(8) in netns and returns what it prints; its error carries what
// ip wrote to stderr, which names the problem (no such device, a route the
// kernel refuses).
func ip(ctx context.Context, netns string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"-n", netns}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
