package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/ring"
	"github.com/strait-net/strait/tunnel"
)

// udpPlane is the gateway's UDP state. Its maps are guarded by Gateway.mu,
// like the TCP listeners, except ingress (its own mu: streams arrive
// without Gateway.mu); each listener guards its own flows.
type udpPlane struct {
	rev       uint64                   // store revision realized; 0: nothing yet
	listeners map[string]*udpListener  // "ip:port" → listener
	claims    map[string]catalog.Key   // "ip:port" → the import that has it
	imports   map[catalog.Key][]string // import → its UDP addresses
	failed    map[catalog.Key]bool     // imports whose sockets did not open: retried every time
	sweeping  bool

	mu      sync.Mutex                   // guards ingress
	ingress map[*udpIngressFlow]struct{} // flows where this gateway exports; nil until the first
}

// udpRoute is where an import's UDP flows go.
type udpRoute struct {
	ns, name string
	clusters []string // exporting clusters, in order of preference
	labels   map[string]string
}

// udpRetry is how long a flow that cannot be carried (denied, no session,
// refused by the exporting gateway) drops its datagrams before the next
// datagram tries again: a client sending fast costs one attempt, one log
// line and one stream per interval, not per datagram.
const udpRetry = time.Second

// reconcileUDP makes the UDP sockets of imports match the store, from the
// changes since its last call (all of them when the store cannot tell).
// Gateway.mu is held.
func (g *Gateway) reconcileUDP(set *catalog.Set) error {
	u := &g.udp
	if g.ctx == nil || g.ctx.Err() != nil {
		return nil
	}
	if u.listeners == nil {
		u.listeners, u.claims, u.imports, u.failed = map[string]*udpListener{}, map[string]catalog.Key{}, map[catalog.Key][]string{}, map[catalog.Key]bool{}
	}
	if !u.sweeping {
		u.sweeping = true
		ctx := g.ctx
		g.spawn(func() { g.sweepUDP(ctx) })
	}
	// Shared, not copied: only read here, and copying every changed import
	// was most of this function's cost in a 20 000-import apply.
	changed, deleted, rev, reset := set.ChangesShared(u.rev, catalog.KindServiceImport)
	if u.rev == 0 {
		reset = true
	}
	imports := map[catalog.Key]*catalog.ServiceImport{} // nil: gone
	if reset {
		for k := range u.imports {
			imports[k] = nil
		}
	}
	// Only imports with a UDP port now or before concern this: the rest
	// (most, in a clusterset of TCP services) are skipped here rather
	// than sorted and looked at below.
	for _, k := range deleted {
		if _, ok := u.imports[k]; ok || u.failed[k] {
			imports[k] = nil
		}
	}
	for _, r := range changed {
		imp := r.(*catalog.ServiceImport)
		if k := imp.Key(); hasUDPPort(imp) || u.failed[k] || len(u.imports[k]) > 0 {
			imports[k] = imp
		}
	}
	for k := range u.failed {
		if _, ok := imports[k]; !ok {
			if r, ok := set.Get(k); ok {
				imports[k] = r.(*catalog.ServiceImport)
			}
		}
	}
	u.rev = rev
	// Release first, so an address moving between imports is free.
	keys := slices.SortedFunc(func(yield func(catalog.Key) bool) {
		for k := range imports {
			if !yield(k) {
				return
			}
		}
	}, cmpKey)
	want := map[catalog.Key][]string{}
	for _, k := range keys {
		var addrs []string
		if imp := imports[k]; imp != nil {
			addrs = udpAddrs(imp)
		}
		want[k] = addrs
		for _, a := range u.imports[k] {
			if !slices.Contains(addrs, a) && u.claims[a] == k {
				if l := u.listeners[a]; l != nil {
					l.close()
				}
				delete(u.listeners, a)
				delete(u.claims, a)
			}
		}
		delete(u.imports, k)
		delete(u.failed, k)
	}
	var errs []error
	for _, k := range keys {
		imp := imports[k]
		if imp == nil || len(want[k]) == 0 {
			continue
		}
		route := &udpRoute{ns: k.Namespace, name: k.Name, clusters: imp.SourceClusters(), labels: imp.Metadata.Labels}
		u.imports[k] = want[k]
		for _, a := range want[k] {
			if owner, ok := u.claims[a]; ok && owner != k {
				errs = append(errs, fmt.Errorf("import %s/%s: UDP address %s is import %s/%s's", k.Namespace, k.Name, a, owner.Namespace, owner.Name))
				u.failed[k] = true
				continue
			}
			if l := u.listeners[a]; l != nil {
				l.route.Store(route)
				continue
			}
			l, err := g.listenUDP(a, route)
			if err != nil {
				errs = append(errs, fmt.Errorf("import %s/%s: %w", k.Namespace, k.Name, err))
				u.failed[k] = true
				continue
			}
			u.listeners[a], u.claims[a] = l, k
		}
	}
	return errors.Join(errs...)
}

func cmpKey(a, b catalog.Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// udpAddrs are the addresses an import's UDP ports listen on.
func hasUDPPort(imp *catalog.ServiceImport) bool {
	for _, p := range imp.Spec.Ports {
		if p.Protocol == catalog.UDP {
			return true
		}
	}
	return false
}

func udpAddrs(imp *catalog.ServiceImport) []string {
	var out []string
	for _, ipStr := range imp.Spec.IPs {
		ip, err := netip.ParseAddr(ipStr)
		if err != nil {
			continue // catalog validation already rejects this
		}
		for _, p := range imp.Spec.Ports {
			if p.Protocol != catalog.UDP {
				continue
			}
			if a := net.JoinHostPort(ip.String(), strconv.Itoa(int(p.Port))); !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// udpStatus lists the UDP import addresses, sorted, each as "ns/name
// ip:port flows N". Gateway.mu is held.
func (g *Gateway) udpStatus() []string {
	var out []string
	for addr, l := range g.udp.listeners {
		r := l.route.Load()
		l.mu.Lock()
		n := len(l.flows)
		l.mu.Unlock()
		out = append(out, fmt.Sprintf("%s/%s %s flows %d", r.ns, r.name, addr, n))
	}
	slices.Sort(out)
	return out
}

// closeUDP closes every UDP socket and flow; the gateway is stopping.
// Gateway.mu is held.
func (g *Gateway) closeUDP() {
	for a, l := range g.udp.listeners {
		l.close()
		delete(g.udp.listeners, a)
	}
	g.udp.mu.Lock()
	flows := make([]*udpIngressFlow, 0, len(g.udp.ingress))
	for f := range g.udp.ingress {
		flows = append(flows, f)
	}
	g.udp.mu.Unlock()
	for _, f := range flows {
		f.close()
	}
}

// sweepUDP ends idle flows until ctx is done.
func (g *Gateway) sweepUDP(ctx context.Context) {
	idle := g.cfg.UDP.idleTimeout()
	t := time.NewTicker(g.cfg.UDP.sweepInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		g.mu.Lock()
		ls := make([]*udpListener, 0, len(g.udp.listeners))
		for _, l := range g.udp.listeners {
			ls = append(ls, l)
		}
		g.mu.Unlock()
		for _, l := range ls {
			l.sweep(now, idle)
		}
		g.udp.mu.Lock()
		var idleFlows []*udpIngressFlow
		for f := range g.udp.ingress {
			if f.act.idleSince(now) >= idle {
				idleFlows = append(idleFlows, f)
			}
		}
		g.udp.mu.Unlock()
		for _, f := range idleFlows {
			f.close()
		}
	}
}

// udpListener receives the datagrams of one UDP address of an import and
// answers its clients from it, so a reply's source is the address the
// client sent to.
type udpListener struct {
	g     *Gateway
	conn  *net.UDPConn
	local netip.AddrPort
	route atomic.Pointer[udpRoute]

	mu     sync.Mutex
	flows  map[netip.AddrPort]*udpFlow
	closed bool
}

// udpReadBuffer is the socket receive buffer asked for: a burst at tens of
// thousands of datagrams per second outlasts the kernel default of 208 KiB
// while the reader is descheduled on a busy host (capped by rmem_max).
const udpReadBuffer = 4 << 20

func (g *Gateway) listenUDP(addr string, route *udpRoute) (*udpListener, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	_ = conn.SetReadBuffer(udpReadBuffer)
	_ = conn.SetWriteBuffer(udpReadBuffer)
	l := &udpListener{g: g, conn: conn, local: conn.LocalAddr().(*net.UDPAddr).AddrPort(), flows: map[netip.AddrPort]*udpFlow{}}
	l.route.Store(route)
	g.spawn(l.serve)
	g.log.Info("import listening", "import", route.ns+"/"+route.name, "addr", addr, "protocol", "UDP")
	return l, nil
}

func (l *udpListener) close() {
	l.mu.Lock()
	l.closed = true
	flows := make([]*udpFlow, 0, len(l.flows))
	for _, f := range l.flows {
		flows = append(flows, f)
	}
	l.mu.Unlock()
	l.conn.Close()
	for _, f := range flows {
		f.end("", nil)
	}
}

// serve receives the import's datagrams. It waits for the socket to be
// readable holding no buffer and reads into a pooled one: a gateway with
// thousands of UDP imports keeps no buffer per import.
func (l *udpListener) serve() {
	m := &l.g.metrics.udp
	rc, err := l.conn.SyscallConn()
	if err != nil {
		l.g.log.Warn("import receive failed", "addr", l.local.String(), "err", err)
		return
	}
	var delay time.Duration
	budget := newUDPBudget(l.g.cfg.UDP.importRate())
	for {
		if !budget.spend() {
			if wait := budget.renew(time.Now()); wait > 0 {
				l.pause(rc, wait, m)
			}
		}
		var (
			bp   *[]byte
			n    int
			from syscall.Sockaddr
			rerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			if bp == nil {
				bp = datagramBufs.Get().(*[]byte)
			}
			for {
				n, from, rerr = syscall.Recvfrom(int(fd), *bp, 0)
				switch rerr {
				case syscall.EINTR:
					continue
				case syscall.EAGAIN:
					datagramBufs.Put(bp)
					bp = nil
					return false
				}
				return true
			}
		})
		if err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			if bp != nil {
				datagramBufs.Put(bp)
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// As for TCP accept: out of memory or buffers, back off and
			// retry rather than leave the import dead.
			if delay == 0 {
				l.g.log.Warn("import receive failed", "addr", l.local.String(), "err", err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if client, ok := addrPortOf(from); ok {
			l.receive(client, (*bp)[:n], m)
		}
		datagramBufs.Put(bp)
	}
}

// pause leaves the socket unread for wait, the import being past its
// budget, and counts what the kernel dropped at it meanwhile.
func (l *udpListener) pause(rc syscall.RawConn, wait time.Duration, m *udpMetrics) {
	var before, after uint32
	var okBefore, okAfter bool
	_ = rc.Control(func(fd uintptr) { before, okBefore = socketDrops(fd) })
	time.Sleep(wait)
	_ = rc.Control(func(fd uintptr) { after, okAfter = socketDrops(fd) })
	if okBefore && okAfter {
		m.drops[pointEgress][dropImportRate].Add(uint64(after - before)) // wraps as the kernel's u32 does
	}
}

// receive hands one datagram of client to its flow.
func (l *udpListener) receive(client netip.AddrPort, p []byte, m *udpMetrics) {
	now := time.Now()
	f := l.flow(client, now)
	if f == nil {
		return
	}
	if f.dead >= 0 {
		m.drop(pointEgress, f.dead)
		return
	}
	f.act.touch(now.UnixNano())
	if !f.q.push(p) {
		m.drop(pointEgress, dropQueueFull)
		return
	}
	m.out(pointEgress, len(p))
}

func addrPortOf(sa syscall.Sockaddr) (netip.AddrPort, bool) {
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)), true
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port)), true
	}
	return netip.AddrPort{}, false
}

// udpFlow is one client's flow at the importing gateway.
type udpFlow struct {
	l      *udpListener
	client netip.AddrPort
	// dead ≥ 0 marks a flow that carries nothing until expires, with the
	// reason its datagrams are dropped; it has no stream.
	dead    int
	expires time.Time
	st      tunnel.Stream
	q       *datagramQueue
	act     udpActivity
	done    chan struct{}
	once    sync.Once
}

// flow returns the client's flow, opening it (policy, stream) if there is
// none. It returns nil when the datagram was dropped for want of a slot.
func (l *udpListener) flow(client netip.AddrPort, now time.Time) *udpFlow {
	l.mu.Lock()
	f := l.flows[client]
	l.mu.Unlock()
	if f != nil && (f.dead < 0 || now.Before(f.expires)) {
		return f
	}
	if f != nil {
		f.end("", nil)
	}
	g := l.g
	m := &g.metrics.udp
	if !m.open(pointEgress, g.cfg.UDP.maxFlows()) {
		m.drop(pointEgress, dropFlowLimit)
		return nil
	}
	f = &udpFlow{l: l, client: client, dead: -1, done: make(chan struct{})}
	route := l.route.Load()
	if reason := l.open(f, route, now); reason >= 0 {
		f.dead, f.expires = reason, now.Add(udpRetry)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		f.end("", nil)
		return nil
	}
	l.flows[client] = f
	l.mu.Unlock()
	if f.dead < 0 {
		g.spawn(f.send)
		g.spawn(f.receive)
	}
	return f
}

// open checks egress policy and opens the flow's stream; it returns -1, or
// the drop reason when the flow cannot be carried.
func (l *udpListener) open(f *udpFlow, route *udpRoute, now time.Time) int {
	g := l.g
	ns, labels := g.source(f.client.Addr())
	rt := g.routes.Load()
	dec := rt.policy.Decide(
		policy.Source{Cluster: g.cfg.Cluster, Namespace: ns, Labels: labels},
		policy.Destination{Export: route.name, Namespace: route.ns, Labels: route.labels})
	if !dec.Allow {
		g.metrics.denied(pointEgress)
		g.log.Info("flow denied", "at", "egress", "protocol", "UDP", "import", route.ns+"/"+route.name, "client", f.client.String(), "reason", dec.Reason)
		return dropDenied
	}
	hdr := Header{Namespace: route.ns, Export: route.name, Port: l.local.Port(), Datagram: true, SourceNamespace: ns, SourceLabels: labels}.Marshal()
	key := ring.KeyOf(17, f.client, l.local)
	var lastErr error = errors.New("no exporting cluster configured (spec.clusters of the ServiceImport)")
	for _, cluster := range route.clusters {
		pool := g.peer(cluster)
		if pool == nil {
			lastErr = errors.New("no Peer resource for cluster " + cluster)
			continue
		}
		st, err := pool.OpenStream(context.Background(), key, hdr)
		if err != nil {
			lastErr = err
			continue
		}
		f.st, f.q = st, newDatagramQueue(g.cfg.UDP.queueBytes())
		f.act.touch(now.UnixNano())
		return -1
	}
	g.metrics.openFailures.Add(1)
	g.log.Warn("import unreachable", "protocol", "UDP", "import", route.ns+"/"+route.name, "err", lastErr)
	return dropUnreachable
}

// send writes the flow's queued datagrams to its stream.
func (f *udpFlow) send() {
	if err := f.q.drain(f.st, f.done); err != nil {
		f.fail(err)
	}
}

// receive answers the client with the datagrams the stream brings, from
// the import's address, a batch at a time: what one stream read brought.
func (f *udpFlow) receive() {
	m := &f.l.g.metrics.udp
	d := tunnel.NewDatagramReader(f.st)
	s := newDatagramSender(f.l.conn, net.UDPAddrFromAddrPort(f.client))
	dropped := func(error) { m.drop(pointEgress, dropSend) }
	for {
		p, err := d.Next()
		if err != nil {
			f.flush(s, dropped)
			f.fail(err)
			return
		}
		f.act.touch(time.Now().UnixNano())
		if s.add(p) || !d.Buffered() {
			f.flush(s, dropped)
		}
	}
}

func (f *udpFlow) flush(s *datagramSender, dropped func(error)) {
	m := &f.l.g.metrics.udp
	n, bytes, _ := s.flush(dropped)
	m.dgramsIn[pointEgress].Add(uint64(n))
	m.bytesIn[pointEgress].Add(uint64(bytes))
}

// fail ends the flow after its stream failed or ended.
func (f *udpFlow) fail(err error) {
	var reset *tunnel.ResetError
	switch {
	case errors.As(err, &reset) && reset.Remote:
		f.end("", reset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		f.end("datagram stream cut inside a record", nil)
	default:
		f.end("", nil)
	}
}

// end closes the flow once; with reset, the stream is reset with that
// reason. A flow the exporting gateway reset (refused, denied, target
// unreachable) is logged with the peer's reason and leaves a dead entry
// that keeps the client's slot for udpRetry, so that its next datagrams
// are dropped as refused instead of each opening a stream the peer
// refuses again.
func (f *udpFlow) end(reset string, peerReset *tunnel.ResetError) {
	f.once.Do(func() {
		close(f.done)
		if f.st != nil {
			if reset != "" {
				_ = f.st.Reset(reset)
			} else {
				_ = f.st.Close()
			}
		}
		l := f.l
		if peerReset != nil {
			route := l.route.Load()
			l.g.log.Info("flow reset by peer", "protocol", "UDP", "import", route.ns+"/"+route.name, "client", f.client.String(), "reason", peerReset.Reason)
		}
		l.mu.Lock()
		if l.flows[f.client] == f {
			delete(l.flows, f.client)
			if peerReset != nil && !l.closed {
				// The dead entry takes over this flow's slot.
				l.flows[f.client] = &udpFlow{l: l, client: f.client, dead: dropRefused, expires: time.Now().Add(udpRetry), done: make(chan struct{})}
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
		l.g.metrics.udp.close(pointEgress)
	})
}

// sweep ends the listener's flows idle for idle, and dead ones expired.
func (l *udpListener) sweep(now int64, idle time.Duration) {
	t := time.Unix(0, now)
	l.mu.Lock()
	var ended []*udpFlow
	for _, f := range l.flows {
		if (f.dead >= 0 && !t.Before(f.expires)) || (f.dead < 0 && f.act.idleSince(now) >= idle) {
			ended = append(ended, f)
		}
	}
	l.mu.Unlock()
	for _, f := range ended {
		f.end("", nil)
	}
}
