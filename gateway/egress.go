package gateway

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/ring"
	"github.com/strait-net/strait/tunnel"
)

// importRoute is where an import's connections go.
type importRoute struct {
	ns, name string
	clusters []string // exporting clusters, in order of preference
	labels   map[string]string
}

// importListener accepts client connections on one address of an import:
// its own listening socket, or the steering's shared one.
type importListener struct {
	ln    *net.TCPListener
	port  uint16 // the import's port: the exporting gateway picks the target by it
	route atomic.Pointer[importRoute]

	steered *steering      // set when steered instead of ln
	dst     netip.AddrPort // the steered destination
}

func (l *importListener) close() {
	if l.steered != nil {
		l.steered.unsteer(l)
		return
	}
	l.ln.Close()
}

func (g *Gateway) listenImport(addr string, route *importRoute) (*importListener, error) {
	if l, ok, err := g.steerImport(addr, route); ok {
		return l, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g.setListenerCongestion(ln.(*net.TCPListener))
	l := &importListener{ln: ln.(*net.TCPListener), port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	l.route.Store(route)
	g.spawn(func() {
		var delay time.Duration
		for {
			c, err := l.ln.AcceptTCP()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// Out of file descriptors (EMFILE, ENFILE) or memory:
				// the listener works again once some are freed, so
				// back off and retry, as net/http does, instead of
				// leaving the import dead with its socket still open.
				if delay == 0 {
					g.log.Warn("import accept failed", "addr", addr, "err", err)
				}
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			delay = 0
			if !g.admitClient(c) {
				continue
			}
			g.spawn(func() { g.serveClient(c, l.route.Load(), l.port) })
		}
	})
	g.log.Info("import listening", "import", route.ns+"/"+route.name, "addr", addr)
	return l, nil
}

// flowKey identifies a client connection for the choice of remote gateway,
// so that one flow always takes the same path while others spread.
func flowKey(c *net.TCPConn) uint64 {
	return ring.KeyOf(6, c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort())
}

// serveClient carries one client connection of an import's port to the
// exporting cluster. The client's TCP handshake ended here, and the stream
// opens on a warm session with the header in front of the first bytes, so
// the WAN sees the request itself first. c holds a place of the stream
// limit (admitClient), which it gives back when it ends.
func (g *Gateway) serveClient(c *net.TCPConn, route *importRoute, port uint16) {
	defer g.limit.release()
	g.metrics.clientConns.Add(1)
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	ns, labels := g.source(src)
	rt := g.routes.Load()
	dec := rt.policy.Decide(
		policy.Source{Cluster: g.cfg.Cluster, Namespace: ns, Labels: labels},
		policy.Destination{Export: route.name, Namespace: route.ns, Labels: route.labels})
	if !dec.Allow {
		g.metrics.denied(pointEgress)
		g.log.Info("connection denied", "at", "egress", "import", route.ns+"/"+route.name, "client", c.RemoteAddr().String(), "reason", dec.Reason)
		abort(c)
		return
	}
	hdr := Header{Namespace: route.ns, Export: route.name, Port: port, SourceNamespace: ns, SourceLabels: labels}.Marshal()
	key := flowKey(c)
	var lastErr error = errors.New("no exporting cluster configured (spec.clusters of the ServiceImport)")
	for _, cluster := range route.clusters {
		pool := g.peer(cluster)
		if pool == nil {
			lastErr = errors.New("no Peer resource for cluster " + cluster)
			continue
		}
		start := time.Now()
		st, err := pool.OpenStream(context.Background(), key, hdr)
		if err != nil {
			lastErr = err
			continue
		}
		g.metrics.openTime.Observe(time.Since(start).Seconds())
		g.metrics.streamOpened(pointEgress)
		up, down, err := splice(c, st, nil)
		g.metrics.streamClosed(pointEgress, up, down)
		var reset *tunnel.ResetError
		if errors.As(err, &reset) && reset.Remote {
			// The exporting gateway refused or aborted the stream; its
			// reason (unknown export, policy, unreachable target) belongs in
			// this cluster's log too.
			g.log.Info("stream reset by peer", "import", route.ns+"/"+route.name, "peer", cluster, "reason", reset.Reason)
		} else if err != nil {
			g.log.Debug("stream ended", "import", route.ns+"/"+route.name, "peer", cluster, "err", err)
		}
		return
	}
	g.metrics.openFailures.Add(1)
	g.log.Warn("import unreachable", "import", route.ns+"/"+route.name, "err", lastErr)
	abort(c)
}

// abort closes c with a reset, so the client learns at once that the
// connection is refused instead of seeing an orderly end of stream.
func abort(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
