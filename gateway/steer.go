package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/steer"
)

// Import interception (Config.Intercept). With steering, every IPv4
// import address:port is an entry in one eBPF map and all their
// connections arrive on one listener (package steer); an import costs a
// map entry and a small struct instead of a listening socket and an
// accept goroutine. Measured (steer.BenchmarkAdd, load average 16): 16 µs
// to add and remove an entry, 95 µs to open and close a listener; and
// `strait gateway bench-imports` (load 30): 20 000 imports cost 0.70 s of
// CPU and 3.8 KB of RSS each steered, 1.73 s and 7.4 KB with listeners,
// which also ran out of the gateway's 20 000 file descriptors. The
// alternatives were nftables TPROXY (one listener too, but a table and
// policy-routing rules in the node's namespace that outlive a killed
// gateway and that two gateways in one namespace must not share) and one
// wildcard listener per port on the clusterset range's local route (it
// takes the port on every address of the node, the gateway's own WAN
// port included). The steering program is a BPF link that ends with the
// process and claims only the destinations in its map. It does not route:
// the address must still be local (the clusterset range as a local route
// on gateway nodes, README "Deploying"), which steerImport checks as a
// listener's bind did.
//
// A UDP import port would take the steerer's UDP socket (steer.UDP) and
// entries with Proto steer.UDP; the datagram's destination tells the
// import apart as the accepted connection's local address does here.

// steering is the gateway's steerer and the routes of its destinations.
type steering struct {
	s  *steer.Steerer
	ln *net.TCPListener

	mu    sync.RWMutex
	dests map[netip.AddrPort]*importListener

	local    localAddrs
	pending  []*importListener // added to dests, not yet to the program's map: flushSteering
	removals []steer.Dest      // out of dests, not yet out of the program's map
}

// startSteering loads the steerer unless imports use listeners; in auto
// mode a kernel or process that cannot load it leaves the gateway on
// listeners, with a warning saying why.
func (g *Gateway) startSteering() error {
	mode := g.cfg.intercept()
	if mode == InterceptListeners {
		return nil
	}
	s, err := steer.New(steer.Config{})
	if err == nil {
		var ln *net.TCPListener
		if ln, err = steer.ListenTCP("127.0.0.1:0"); err == nil {
			g.setListenerCongestion(ln)
			if err = s.SetSocket(steer.TCP, ln); err != nil {
				ln.Close()
			} else {
				st := &steering{s: s, ln: ln, dests: map[netip.AddrPort]*importListener{}}
				g.steering = st
				g.spawn(func() { g.acceptSteered(st) })
				return nil
			}
		}
		s.Close()
	}
	if mode == InterceptSteer {
		return fmt.Errorf("intercept %s: %w", mode, err)
	}
	g.log.Warn("imports fall back to a listener per address", "reason", err)
	return nil
}

func (st *steering) close() {
	st.s.Close()
	st.ln.Close()
}

// acceptSteered serves the connections of every steered import.
func (g *Gateway) acceptSteered(st *steering) {
	var delay time.Duration
	for {
		c, err := st.ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// As listenImport: out of descriptors or memory passes.
			if delay == 0 {
				g.log.Warn("import accept failed", "err", err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		dst := c.LocalAddr().(*net.TCPAddr).AddrPort()
		dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
		st.mu.RLock()
		l := st.dests[dst]
		st.mu.RUnlock()
		if l == nil {
			// Removed between the SYN and now, or dialed at the
			// listener's own loopback address.
			g.metrics.unknownImport.Add(1)
			abort(c)
			continue
		}
		if !g.admitClient(c) {
			continue
		}
		g.spawn(func() { g.serveClient(c, l.route.Load(), l.port) })
	}
}

// steerImport programs one import address; ok is false when the address
// is not steered (IPv6, or no steering) and needs a listener.
func (g *Gateway) steerImport(addr string, route *importRoute) (l *importListener, ok bool, err error) {
	st := g.steering
	if st == nil {
		return nil, false, nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Unmap().Is4() {
		return nil, false, nil
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	// A listener could not bind an address that is not on this host; a
	// steered one would be silently unreachable, so say so the same way.
	if !st.local.has(ap.Addr()) {
		return nil, true, fmt.Errorf("listen tcp %s: bind: cannot assign requested address (not a local address of this host; see the README's deploying section)", addr)
	}
	l = &importListener{port: ap.Port(), steered: st, dst: ap}
	l.route.Store(route)
	st.mu.Lock()
	st.dests[ap] = l
	st.mu.Unlock()
	st.pending = append(st.pending, l)
	return l, true, nil
}

// flushSteering adds the destinations steerImport collected to the
// program's map in one batch (a syscall each cost 8 µs, BenchmarkAdd): a
// reconcile calls it before it returns, g.mu held. Should the map refuse
// them, their imports are unrealized like a listener that did not open,
// and retried by the next reconcile.
func (g *Gateway) flushSteering() error {
	st := g.steering
	if st == nil || len(st.pending) == 0 && len(st.removals) == 0 {
		return nil
	}
	// Removals first: an address removed and claimed again in one
	// reconcile is in both lists and must end up steered.
	if len(st.removals) > 0 {
		err := st.s.Remove(st.removals...)
		st.removals = nil
		if err != nil {
			g.log.Warn("steered import addresses not all removed", "err", err)
		}
	}
	var ds []steer.Dest
	var pending []*importListener
	st.mu.RLock()
	for _, l := range st.pending {
		if st.dests[l.dst] == l { // not closed since
			ds = append(ds, steer.Dest{Addr: l.dst.Addr(), Port: l.dst.Port(), Proto: steer.TCP})
			pending = append(pending, l)
		}
	}
	st.mu.RUnlock()
	st.pending = nil
	err := st.s.Add(ds...)
	if err == nil {
		return nil
	}
	for _, l := range pending {
		addr := l.dst.String()
		if g.listeners[addr] == l {
			delete(g.listeners, addr)
		}
		st.mu.Lock()
		delete(st.dests, l.dst)
		st.mu.Unlock()
		r := l.route.Load()
		g.rec.failed[catalog.Key{Kind: catalog.KindServiceImport, Namespace: r.ns, Name: r.name}] = true
	}
	return err
}

// unsteer removes l's destination: at once from the routes, from the
// program's map with the reconcile's flushSteering.
func (st *steering) unsteer(l *importListener) {
	st.mu.Lock()
	mine := st.dests[l.dst] == l
	if mine {
		delete(st.dests, l.dst)
	}
	st.mu.Unlock()
	if mine {
		st.removals = append(st.removals, steer.Dest{Addr: l.dst.Addr(), Port: l.dst.Port(), Proto: steer.TCP})
	}
}

// localAddrs answers whether an address is local: the kernel's local
// routes (per address, and ranges such as `local 10.255.0.0/16 dev lo`),
// read at most once per localRefresh when an address is not among them.
type localAddrs struct {
	prefixes []netip.Prefix
	read     time.Time
}

const localRefresh = 100 * time.Millisecond

func (la *localAddrs) has(a netip.Addr) bool {
	for _, p := range la.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	if time.Since(la.read) < localRefresh {
		return false
	}
	ps, err := localRoutes()
	la.read = time.Now()
	if err != nil {
		return true // cannot tell: do not refuse what may work
	}
	la.prefixes = ps
	for _, p := range la.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
