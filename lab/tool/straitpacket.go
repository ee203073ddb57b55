package tool

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/lab/topology"
	"github.com/strait-net/strait/packet"
)

// straitPacket is what the strait-packet tool adds to the strait tool: the
// same gateway processes, configured with `peers.<cluster>.data-plane:
// packet` on both sides (docs/packet.md, "The gateway"), so that the
// gateways agree on the packet mode over their sessions and fill the BPF
// maps themselves — unlike the packet tool, which fills them with `strait
// packet apply`. Experiments then measure the gateways' part too: their
// agreement, their restarts (the pins outlive a killed process) and their
// health checker's view written into the Maglev tables.
type straitPacket struct {
	changes changes
	pins    string            // the tool's bpffs mount, "" when not mounted
	snat    map[string]string // SNAT address by gateway node ID
	nodes   []*topology.PlanNode
}

// packetSNATBase is the first gateway's SNAT address; the k-th gateway of
// the lab gets packetSNATBase + k. From the reserved 240.0.0.0/4 space, as
// the packet tool's, so that it meets no lab addressing.
var packetSNATBase = netip.MustParseAddr("240.97.0.1")

// setup mounts the bpffs the gateways pin their programs in, gives every
// gateway node an SNAT address (on lo: the programs own its ports, no
// socket binds it) and routes the server's replies to an exporting
// gateway's SNAT address through that gateway. Clients reach ImportVIP,
// which every importing gateway holds as a local address (the stream
// mode's listeners take it until the packet mode is agreed); with one
// importing gateway the client routes it to that gateway, with several the
// strait tool's nexthop watcher does.
func (p *straitPacket) setup(ctx context.Context, env Env, exportGWs, importGWs []*topology.PlanNode) error {
	pins, err := mountPins(ctx, env.Dir)
	if err != nil {
		return err
	}
	p.pins = pins
	p.snat = map[string]string{}
	snat := packetSNATBase
	for _, side := range []struct {
		gws       []*topology.PlanNode
		importing bool
	}{{exportGWs, false}, {importGWs, true}} {
		for _, g := range side.gws {
			p.nodes = append(p.nodes, g)
			a := snat.String()
			snat = snat.Next()
			p.snat[g.ID] = a
			if err := p.changes.run(ctx, []string{"ip", "-n", g.Netns, "addr", "del", a + "/32", "dev", "lo"},
				"ip", "-n", g.Netns, "addr", "add", a+"/32", "dev", "lo"); err != nil {
				return err
			}
			if !side.importing {
				if err := p.changes.copyRoute(ctx, env.Server, g.Addr, netip.MustParseAddr(a)); err != nil {
					return err
				}
				continue
			}
			vip := ImportVIP.String() + "/32"
			if err := p.changes.run(ctx, []string{"ip", "-n", g.Netns, "addr", "del", vip, "dev", "lo"},
				"ip", "-n", g.Netns, "addr", "add", vip, "dev", "lo"); err != nil {
				return err
			}
		}
	}
	if len(importGWs) == 1 {
		return p.changes.copyRoute(ctx, env.Client, importGWs[0].Addr, ImportVIP)
	}
	return nil
}

// healthTarget is where the nexthop watcher probes an importing gateway
// node: its programs, which answer health probes on the probe port at the
// node's address on their LAN device — via, the gateway's address on the
// client's link — and not its process's health responder. A kill -9
// closes the latter while the programs go on forwarding the client's
// flows; judged by it, the watcher would move those flows to another
// gateway, whose programs know none of them (docs/packet.md, "Health").
func (p *straitPacket) healthTarget(via netip.Addr) string {
	return netip.AddrPortFrom(via, packet.DefaultProbePort).String()
}

// config is the part of node's gateway configuration that turns the packet
// mode on toward peer. The gateway tears its programs down when it stops
// on its own; one killed by an experiment leaves them forwarding, and its
// restart adopts them.
func (p *straitPacket) config(env Env, node *topology.PlanNode, peer string) (string, error) {
	other := env.Client
	if node.Cluster == env.Server.Cluster {
		other = env.Server
	}
	lan, err := lanDevice(env.Lab.Plan, node, other)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("peers: {%s: {data-plane: %s}}\npacket: {lan: %s, snat: %s, pin-root: %s, name: %s, teardown-on-exit: true}\n",
		peer, gateway.DataPlanePacket, lan, p.snat[node.ID], p.pins, packetName(node)), nil
}

// waitActive waits until every gateway says the packet mode carries its
// side: the importing gateways' imports and the exporting gateways'
// exports (each of those fills its map once it heard an offer).
func waitActive(ctx context.Context, socket, peer string, imports bool) error {
	client := gateway.NewAdminClient(socket)
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	last := fmt.Errorf("no data plane for %s in the status", peer)
	for time.Now().Before(deadline) {
		st, err := client.Status()
		if err != nil {
			last = err
		}
		for _, d := range st.DataPlanes {
			if d.Cluster != peer {
				continue
			}
			if d.Active && (imports && d.Imports || !imports && d.Exports) {
				return nil
			}
			last = fmt.Errorf("data plane for %s: configured %q, peer %q, active %v, imports %v, exports %v, reason %q",
				peer, d.Configured, d.Peer, d.Active, d.Imports, d.Exports, d.Reason)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("packet mode not active after 30s: %w", last)
}

// counters sums the programs' counters over nodes.
func (p *straitPacket) counters(ctx context.Context, env Env, nodes []*topology.PlanNode) (map[string]uint64, error) {
	sum := map[string]uint64{}
	for _, n := range nodes {
		c, err := packetCounters(ctx, env, n, p.pins)
		if err != nil {
			return nil, err
		}
		for k, v := range c {
			sum[k] += v
		}
	}
	return sum, nil
}

// check proves that the client's packets take the programs, not the
// gateways' stream mode: a TCP connection to target must open, and
// meanwhile the importing programs must have sent packets into the tunnel
// and received replies, and the exporting ones translated packets.
func (p *straitPacket) check(ctx context.Context, env Env, exportGWs, importGWs []*topology.PlanNode, target string) error {
	beforeI, err := p.counters(ctx, env, importGWs)
	if err != nil {
		return err
	}
	beforeE, err := p.counters(ctx, env, exportGWs)
	if err != nil {
		return err
	}
	if err := connectThrough(ctx, env, target); err != nil {
		return err
	}
	afterI, err := p.counters(ctx, env, importGWs)
	if err != nil {
		return err
	}
	afterE, err := p.counters(ctx, env, exportGWs)
	if err != nil {
		return err
	}
	if afterI["import_tx_packets"] > beforeI["import_tx_packets"] && afterI["reply_rx_packets"] > beforeI["reply_rx_packets"] &&
		afterE["export_rx_packets"] > beforeE["export_rx_packets"] {
		return nil
	}
	return fmt.Errorf("%s answered, but the programs' counters did not move (importing gateways %v, exporting %v)", target, afterI, afterE)
}

// teardown removes what a gateway that did not stop on its own (killed by
// an experiment and not restarted) left pinned, undoes the setup's
// changes, unmounts the bpffs and checks that no pin was left. The
// gateways have stopped before it runs. Safe to call more than once.
func (p *straitPacket) teardown(ctx context.Context, env Env) error {
	var errs []error
	if p.pins != "" {
		for _, n := range p.nodes {
			if _, err := os.Stat(filepath.Join(p.pins, packetName(n))); err != nil {
				continue
			}
			cmd, err := env.Lab.Command(ctx, n.ID, env.Binary, "packet", "teardown", "--name", packetName(n), "--pin-root", p.pins)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("packet teardown on %s: %w: %s", n.ID, err, strings.TrimSpace(string(out))))
			}
		}
	}
	p.nodes = nil
	errs = append(errs, p.changes.revert(ctx))
	if p.pins != "" {
		unmounted, err := unmountPins(ctx, p.pins)
		if unmounted {
			p.pins = ""
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
