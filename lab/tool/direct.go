package tool

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

func init() {
	Register("direct", func() Tool { return &direct{} })
	Register("direct-bbr", func() Tool { return &direct{congestionControl: "bbr"} })
}

// direct is the baseline: plain routing between the clusters over the same
// links every other tool uses, no tunnel, no proxy, no encryption. With a
// congestion control set ("direct-bbr"), the client's and the server's
// routes to each other carry it (ip route … congctl), so every TCP
// connection between them uses it whichever side opens it — a listening
// server's sockets would otherwise keep the algorithm the namespace had
// when they were created. The lab's own default stays what the topology
// says (cubic unless set), and ratios are still taken against "direct".
type direct struct {
	congestionControl string
	changes           changes
}

func (d *direct) Name() string {
	if d.congestionControl == "" {
		return "direct"
	}
	return "direct-" + d.congestionControl
}

func (d *direct) Setup(ctx context.Context, env Env) (map[string]string, error) {
	if d.congestionControl != "" {
		for _, e := range [][2]*planNode{{env.Client, env.Server}, {env.Server, env.Client}} {
			if err := d.changes.amendRoute(ctx, e[0], e[1].Addr, "congctl", d.congestionControl); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Name(), err)
			}
		}
		if err := checkRouteCongestionControl(ctx, env, d.congestionControl); err != nil {
			return nil, fmt.Errorf("%s health check: %w", d.Name(), err)
		}
	}
	return serverTargets(env), nil
}

// checkRouteCongestionControl asks the kernel which route, and so which
// congestion control, the client's packets to the server take.
func checkRouteCongestionControl(ctx context.Context, env Env, cc string) error {
	out, err := exec.CommandContext(ctx, "ip", "-n", env.Client.Netns, "route", "get", env.Server.Addr.String()).Output()
	if err != nil {
		return fmt.Errorf("ip route get %s on %s: %w", env.Server.Addr, env.Client.ID, err)
	}
	if !strings.Contains(string(out), "congctl "+cc) {
		return fmt.Errorf("route to %s on %s does not carry congctl %s: %s", env.Server.Addr, env.Client.ID, cc, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *direct) Teardown(ctx context.Context) error { return d.changes.revert(ctx) }

func (d *direct) Version(context.Context) string {
	if d.congestionControl == "" {
		return "kernel routing; endpoints' TCP congestion control as the lab sets it (cubic unless the topology says otherwise)"
	}
	return "kernel routing; endpoints' TCP congestion control " + d.congestionControl + " (set on their routes to each other)"
}

// Carries: plain routing carries any IP traffic.
func (*direct) Carries(Protocol) bool { return true }

// Processes: none, the kernel routes.
func (*direct) Processes() []Process { return nil }
