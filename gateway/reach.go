package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/strait-net/strait/health"
	"github.com/strait-net/strait/packet"
)

// reachesPeers reports whether some gateway of some peer was heard lately
// (heard), and whether any peer gateway counts at all (judged): one the
// packet mode's prober has had an answer from, or one whose peer's current
// pool has heard some gateway since that pool started. A gateway whose
// programs answered the prober is judged by the prober alone (its sessions
// may probe slowly then: docs/packet.md, "The sessions' probes slow down");
// any other by frames on its sessions within the pool's silence window.
//
// A pool that has heard no one yet is left out rather than counted as
// silent: a Peer resource that changes a peer's gateway list replaces the
// pool, and the new one hears nobody until its first session is up (a
// handshake across the WAN, longer than a silence window on a slow link).
// Counted, it made a gateway with that one peer cut off for that while,
// refusing its cluster's probes though nothing had failed
// (docs/failover.md, "A gateway cut off from its peers").
func (g *Gateway) reachesPeers() (heard, judged bool) {
	g.mu.Lock()
	peers := make([]*peer, 0, len(g.peers))
	for _, p := range g.peers {
		peers = append(peers, p)
	}
	g.mu.Unlock()
	pr := g.packet.prober.Load()
	// Every pool is looked at, not only up to the first gateway heard, so
	// that each records that it heard one.
	for _, p := range peers {
		for _, h := range p.pool.Gateways() {
			if st, ok := proberState(pr, h.Addr); ok && st.Answered {
				heard = heard || st.Live
				judged = true
				continue
			}
			if h.Heard {
				p.heard.Store(true)
				heard = true
			}
			judged = judged || p.heard.Load()
		}
	}
	return heard, judged
}

func proberState(pr *packet.Prober, gw string) (packet.ProbeState, bool) {
	if pr == nil {
		return packet.ProbeState{}, false
	}
	a, err := underlayAddr(gw)
	if err != nil {
		return packet.ProbeState{}, false
	}
	return pr.State(a)
}

// reachRecheck bounds how long watchReach sleeps without a kick: peers
// added or removed by a reconcile change what it judges without one.
const reachRecheck = time.Second

// kickReach asks watchReach to judge again now. The peer pools call it when
// a gateway's Heard changes, the packet mode when its prober's verdicts do:
// a ticker at the probe interval instead would wake every gateway a hundred
// times a second for nothing (docs/packet.md, "What the gateway processes
// cost").
func (g *Gateway) kickReach() {
	select {
	case g.reach <- struct{}{}:
	default:
	}
}

// watchReach answers the cluster's health probes — the health: responder
// (serve) and, in the packet mode, the programs on the LAN — only while
// this gateway is not cut off from its peers: some peer's current pool has
// heard one of its gateways and now no peer gateway is heard (reachesPeers;
// docs/failover.md, "A gateway cut off from its peers"). A cut-off gateway
// refuses the probes (its responder's socket is closed, its programs leave
// them to the stack, which has no socket on the port): the prober takes it
// out at its next probe, where silence would take it out only after the
// prober's silence window.
func (g *Gateway) watchReach(ctx context.Context, serve bool) error {
	t := time.NewTimer(reachRecheck)
	defer t.Stop()
	var resp *health.Responder
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() {
		if resp != nil {
			resp.Close()
		}
	}()
	cut, opened := false, false
	var retry time.Duration // > 0 while a reopened responder keeps failing
	for {
		heard, judged := g.reachesPeers()
		if now := judged && !heard; now != cut {
			cut = now
			if cut {
				g.log.Warn("cut off from every peer gateway: refusing health probes")
			} else {
				g.log.Info("peer gateways heard again: answering health probes")
			}
		}
		if serve && cut {
			retry = 0 // nothing to reopen while cut off
			if resp != nil {
				resp.Close()
				resp = nil
			}
		}
		if serve && !cut && resp == nil {
			r, err := health.NewResponder(health.ResponderConfig{Addr: g.cfg.Health})
			switch {
			case err != nil && !opened:
				return err // at the start, as a bad address should
			case err != nil:
				// Reopening after a cut: try again, backing off from the
				// probe interval to reachRecheck (nothing kicks when a
				// port becomes free).
				if retry == 0 {
					g.log.Warn("health responder not reopened, retrying", "err", err)
					retry = g.cfg.probeInterval()
				} else {
					retry = min(2*retry, reachRecheck)
				}
			default:
				resp, opened, retry = r, true, 0
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = r.Run(ctx)
				}()
			}
		}
		g.packet.setLANProbes(!cut)
		wait := reachRecheck
		if retry > 0 {
			wait = retry
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-g.reach:
		}
	}
}
