package multigw

import (
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
	return topology.LinkEnd{}, fmt.Errorf("%s has no WAN link in lab %s", node, plan.Name)
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
	out, err := exec.CommandContext(ctx, "ip", "-n", end.Netns, "-o", "route", "show", "dev", end.Device).Output()
	if err != nil {
		return nil, fmt.Errorf("routes of %s's uplink %s: %w", node, end.Device, err)
	}
	var routes [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// Flags the kernel shows but takes from no command.
		f := slices.DeleteFunc(strings.Fields(line), func(s string) bool { return s == "linkdown" || s == "dead" })
		if len(f) > 0 {
			routes = append(routes, f)
		}
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", end.Netns, "link", "set", end.Device, "down").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: uplink %s down: %w: %s", node, end.Device, err, strings.TrimSpace(string(out)))
	}
	return func(ctx context.Context) error {
		if out, err := exec.CommandContext(ctx, "ip", "-n", end.Netns, "link", "set", end.Device, "up").CombinedOutput(); err != nil {
			return fmt.Errorf("%s: uplink %s up: %w: %s", node, end.Device, err, strings.TrimSpace(string(out)))
		}
		for _, r := range routes {
			argv := append(append([]string{"-n", end.Netns, "route", "replace"}, r...), "dev", end.Device)
			if out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: put back route %q on %s: %w: %s", node, strings.Join(r, " "), end.Device, err, strings.TrimSpace(string(out)))
			}
		}
		return nil
	}, nil
}
