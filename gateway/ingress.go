package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/tunnel"
)

// acceptSessions takes sessions from peer gateways until the listener
// closes.
func (g *Gateway) acceptSessions(ctx context.Context) error {
	for {
		s, err := g.wan.Accept(ctx)
		if err != nil {
			return err
		}
		g.metrics.sessionsAccepted.Add(1)
		g.attachInbound(s)
		// Close the session at shutdown, or forget it when it ended on
		// its own: waiting for ctx alone would keep every ended session
		// (and a goroutine) until the gateway stops.
		g.spawn(func() {
			select {
			case <-ctx.Done():
			case <-s.Done():
			}
			s.Close()
		})
		g.spawn(func() { g.serveSession(ctx, s) })
	}
}

func (g *Gateway) serveSession(ctx context.Context, s tunnel.Session) {
	for {
		st, err := s.AcceptStream(ctx)
		if err != nil {
			return
		}
		g.spawn(func() { g.serveStream(s.Peer(), st) })
	}
}

// serveStream checks an incoming stream against the exports and policies,
// and connects it to the target of the export's port the client chose. A
// refused stream is reset with the reason, which the sending gateway sees
// at once.
func (g *Gateway) serveStream(peerCluster string, st tunnel.Stream) {
	arrived := time.Now()
	if isPacketHeader(st.Header()) {
		g.servePacketControl(peerCluster, st)
		return
	}
	h, err := ParseHeader(st.Header())
	if err != nil {
		g.refuse(st, "", err.Error())
		return
	}
	rt := g.routes.Load()
	exp, ok := rt.exports[nsName{h.Namespace, h.Export}]
	if !ok {
		g.refuse(st, h.Namespace+"/"+h.Export, "unknown export "+h.Namespace+"/"+h.Export)
		return
	}
	dec := rt.policy.Decide(
		policy.Source{Cluster: peerCluster, Namespace: h.SourceNamespace, Labels: h.SourceLabels},
		policy.Destination{Export: h.Export, Namespace: h.Namespace, Labels: exp.Metadata.Labels})
	if !dec.Allow {
		g.metrics.denied(pointIngress)
		g.log.Info("connection denied", "at", "ingress", "export", h.Namespace+"/"+h.Export, "peer", peerCluster, "reason", dec.Reason)
		_ = st.Reset("denied by policy: " + dec.Reason)
		return
	}
	if h.Datagram {
		g.serveUDPStream(st, h, exp)
		return
	}
	// The port's own target, never another port's: a client of one port
	// must not reach the server of another.
	addr, err := exp.TargetFor(int32(h.Port))
	if err != nil {
		g.refuse(st, h.Namespace+"/"+h.Export, err.Error())
		return
	}
	if !g.limit.admit() {
		g.refusedAtLimit(pointIngress)
		_ = st.Reset(fmt.Sprintf("gateway %s carries max-streams (%d) connections", g.cfg.Cluster, g.limit.max))
		return
	}
	defer g.limit.release()
	target, err := g.dialTarget(addr)
	if err != nil {
		g.refuse(st, h.Namespace+"/"+h.Export, fmt.Sprintf("export target %s unreachable: %v", addr, err))
		return
	}
	g.metrics.streamOpened(pointIngress)
	// toPeer is the export's reply, which goes toward the other cluster.
	toPeer, toTarget, _ := splice(target, st, func() { g.metrics.firstByte.Observe(time.Since(arrived).Seconds()) })
	g.metrics.streamClosed(pointIngress, toPeer, toTarget)
}

func (g *Gateway) refuse(st tunnel.Stream, export, reason string) {
	g.metrics.refused.Add(1)
	g.log.Info("stream refused", "export", export, "reason", reason)
	_ = st.Reset(reason)
}

// dialTarget returns a connection to an export's target, a warm one when
// the preconnector has it.
func (g *Gateway) dialTarget(addr string) (*net.TCPConn, error) {
	g.mu.Lock()
	t := g.targets[addr]
	ctx := g.ctx
	g.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	if t == nil {
		g.metrics.coldDials.Add(1)
		return dialTCP(ctx, addr, g.lanCC)
	}
	c, warm, err := t.get(ctx)
	if warm {
		g.metrics.warmDials.Add(1)
	} else {
		g.metrics.coldDials.Add(1)
	}
	return c, err
}
