// Package gateway is strait's data plane: one process per gateway node of a
// cluster. It listens on the addresses of the cluster's imports, carries
// each client connection as a stream over a warm mutually authenticated
// session to a gateway of the exporting cluster, and there connects it to
// the export's target. Policies are checked on both ends; the resources
// that drive it (Peer, ServiceExport, ServiceImport, AccessPolicy, and the
// Workloads that say who a client address is) arrive through the local
// admin API and survive restarts.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/dns"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/quic"
	"github.com/strait-net/strait/tunnel/wancc"
)

// Gateway is one running gateway. Create it with New, then Run it.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	id      *fabric.Identity
	store   *catalog.Store
	metrics *metrics
	names   *dns.Static
	limit   streamLimit // connections carried at once (limit.go)
	// lanCC is the congestion control of LAN sockets ("" the kernel's),
	// lanOwn strait's own when that is it (lancc_linux.go).
	lanCC  string
	lanOwn *wancc.Algorithm

	routes atomic.Pointer[routes]
	// byAddr is who each Workload address is (workloads.go), read on
	// every connection and replaced whole when Workloads change.
	byAddr atomic.Pointer[map[netip.Addr]identity]

	mu         sync.Mutex // guards everything below, and serializes reconcile
	ctx        context.Context
	peers      map[string]*peer           // cluster ID → its pool
	listeners  map[string]*importListener // "ip:port" → listener
	targets    map[string]*preconnector   // target address → warm connections
	rec        reconciled                 // what reconcile made of the store so far
	udp        udpPlane                   // UDP sockets and flows (udp_egress.go)
	importMaps importMaps                 // peaks of the maps above, to shrink them (mapshrink.go)
	wg         sync.WaitGroup             // every goroutine the gateway starts
	wan        tunnel.Listener
	steering   *steering // nil: a listener per import address
	packet     *packetPlane
	reach      chan struct{} // kicked when a peer gateway may have been heard or lost (reach.go)
	closeOnce  sync.Once
}

// routes is an immutable view of the resources, rebuilt on every change and
// read without locks on every connection.
type routes struct {
	exports map[nsName]*catalog.ServiceExport
	policy  *policy.Evaluator
}

type nsName struct{ ns, name string }

type peer struct {
	addrs  []string
	pool   *tunnel.Pool
	cancel context.CancelFunc
	// heard is set once reachesPeers finds a gateway of pool heard: only
	// then does the cut-off rule judge the peer by pool (reach.go).
	heard atomic.Bool
}

// New loads the identity and the persisted resources and applies the
// configured resource files. It opens no sockets yet.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := fabric.Load(fabric.Config{
		Dir: cfg.Identity.Dir, Cluster: cfg.Cluster,
		CertFile: cfg.Identity.Cert, KeyFile: cfg.Identity.Key, CAFile: cfg.Identity.CA,
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.state()), 0o755); err != nil {
		return nil, err
	}
	store, err := catalog.OpenStore(cfg.state())
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg: cfg, log: log.With("cluster", cfg.Cluster), id: id, store: store,
		metrics: newMetrics(), names: &dns.Static{},
		peers: map[string]*peer{}, listeners: map[string]*importListener{}, targets: map[string]*preconnector{},
		reach: make(chan struct{}, 1),
	}
	g.lanCC, g.lanOwn = g.lanCongestion()
	g.packet = newPacketPlane(g)
	g.metrics.reg.MustRegister(stateCollector{g}, packetCollector{g.packet})
	g.limit.max = int64(cfg.maxStreams())
	g.metrics.maxStreams.Set(float64(g.limit.max))
	for _, path := range cfg.Resources {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		rs, err := catalog.Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, err := store.Apply(rs...); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return g, nil
}

// Run serves until ctx is done, then closes every listener, session and
// connection and returns after all goroutines exited.
func (g *Gateway) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.mu.Lock()
	g.ctx = ctx
	g.mu.Unlock()
	if err := g.packet.startDatapath(ctx); err != nil {
		return err
	}

	server, err := g.transport(nil, mutualServerTLS(g.id), nil)
	if err != nil {
		return err
	}
	if g.wan, err = server.Listen(g.cfg.listen()); err != nil {
		return fmt.Errorf("listen for peer gateways: %w", err)
	}
	g.log.Info("gateway listening", "wan", g.wan.Addr().String(), "admin", g.cfg.admin())
	if err := g.startSteering(); err != nil {
		g.wan.Close()
		return err
	}
	errc := make(chan error, 5)
	g.spawn(func() { errc <- ignoreClosed(g.id.Run(ctx)) })
	g.spawn(func() { g.reclaimLoop(ctx) })
	if err := g.reconcile(); err != nil {
		g.log.Warn("resources not fully applied", "err", err)
	}
	// Sessions are accepted only now, with the exports in place: a
	// restarted gateway's first streams would otherwise be refused as
	// unknown exports. Peers that dialed meanwhile wait in the backlog.
	g.spawn(func() { errc <- ignoreClosed(g.acceptSessions(ctx)) })
	if g.cfg.DNS != "" {
		srv, err := dns.New(dns.Config{Listen: g.cfg.DNS, Imports: g.names, Logger: g.log})
		if err != nil {
			cancel()
			g.shutdown()
			return err // names dns: and the address
		}
		g.spawn(func() { errc <- ignoreClosed(srv.Run(ctx)) })
	}
	if g.cfg.Metrics != "" {
		if err := g.serveMetrics(ctx); err != nil {
			cancel()
			g.shutdown()
			return err
		}
	}
	// The admin socket last but for health: a caller that waits for it to
	// answer (the lab, gatewaytest) may then query DNS and scrape metrics.
	if _, err := g.serveAdmin(ctx); err != nil {
		cancel()
		g.shutdown()
		return err
	}
	if g.cfg.Health != "" {
		// Last, so that a prober sees the gateway live only once it
		// serves its imports and can carry them: a restarted gateway put
		// back into the clients' nexthop group before its first session to
		// the other cluster would have to refuse the flows it gets.
		g.waitPeersLive(ctx)
		if ctx.Err() != nil {
			g.shutdown()
			return nil
		}
	}
	// The packet mode may start later, when a Peer resource asks for it
	// (attachWhenAsked): a gateway with a packet section watches from the
	// start, so its programs refuse the LAN's probes when it is cut off.
	if serve := g.cfg.Health != ""; serve || len(g.cfg.packetPeers()) > 0 || g.cfg.Packet.LAN != "" {
		g.spawn(func() { errc <- g.watchReach(ctx, serve) })
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
		cancel()
	}
	g.shutdown()
	return first
}

// peersLiveWait bounds how long a starting gateway waits for its peers
// before it answers health probes anyway: with every gateway of a peer
// down it is no worse than the others.
const peersLiveWait = 5 * time.Second

// waitPeersLive waits until every peer has a live gateway, at most
// peersLiveWait.
func (g *Gateway) waitPeersLive(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, peersLiveWait)
	defer cancel()
	g.mu.Lock()
	pools := map[string]*tunnel.Pool{}
	for id, p := range g.peers {
		pools[id] = p.pool
	}
	g.mu.Unlock()
	start := time.Now()
	for id, pool := range pools {
		if !pool.WaitLive(ctx) {
			g.log.Warn("answering health probes with no live gateway of a peer", "peer", id, "waited", time.Since(start).Round(time.Millisecond))
		}
	}
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (g *Gateway) spawn(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// shutdown closes everything Run opened and waits for every goroutine.
func (g *Gateway) shutdown() {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		if g.wan != nil {
			g.wan.Close()
		}
		for k, l := range g.listeners {
			l.close()
			delete(g.listeners, k)
		}
		if g.steering != nil {
			g.steering.close()
		}
		for k, p := range g.peers {
			p.cancel()
			p.pool.Close()
			delete(g.peers, k)
		}
		for k, t := range g.targets {
			t.close()
			delete(g.targets, k)
		}
		g.closeUDP()
		g.mu.Unlock()
	})
	g.wg.Wait()
	g.packet.close()
}

// mutualServerTLS requires a client certificate: the fabric verifies it
// (and classifies failures) in VerifyConnection; requiring one here keeps a
// certificate-less client from ever getting a session.
func mutualServerTLS(id *fabric.Identity) *tls.Config {
	c := id.ServerTLS()
	c.ClientAuth = tls.RequireAnyClientCert
	return c
}

// reconciled is what reconcile realized of the store, so that an apply
// costs what it changed rather than the size of the whole set: a gateway
// of a large clusterset holds tens of thousands of imports and receives
// them over many applies.
type reconciled struct {
	rev       uint64                       // store revision realized; 0: nothing yet
	imports   map[catalog.Key][]string     // import → the listener addresses it wants
	claims    map[string]int               // listener address → imports wanting it
	names     map[dns.ImportKey]dns.Import // clusterset names of the imports
	failed    map[catalog.Key]bool         // imports with a listener that did not open: retried every time
	peersErr  bool                         // a peer pool did not start: peers redone every time
	policyErr error                        // the policies' compile error, reported on every apply
	namesErr  error                        // the DNS names' error, reported on every apply
	workloads workloads                    // the Workloads behind byAddr
}

// reconcile makes listeners, peer pools, warm target connections and DNS
// names match the resources in the store. It realizes only the resources
// changed since its last call (the store's Changes), and everything when
// the store cannot tell or when two imports claim one address (a full
// pass decides which gets it).
func (g *Gateway) reconcile() (err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil || g.ctx.Err() != nil {
		return nil
	}
	set := g.store.Set()
	defer g.shrinkImportMaps() // after the UDP imports too
	defer func() { err = errors.Join(err, g.reconcileUDP(set)) }()
	defer g.packet.changed()
	if g.rec.rev != 0 {
		changed, deleted, rev, reset := set.ChangesShared(g.rec.rev) // read only
		if !reset {
			if err, ok := g.reconcileChanges(set, changed, deleted); ok {
				g.rec.rev = rev
				return err
			}
		}
	}
	rev := set.Revision() // before listing: a later change is seen again, harmlessly
	err = g.reconcileAll(set)
	g.rec.rev = rev
	return err
}

// reconcileAll realizes the whole set.
func (g *Gateway) reconcileAll(set *catalog.Set) error {
	var errs []error
	g.setRoutes(set, nil, true, true)
	g.setWorkloads(set, nil, nil, true)
	errs = g.setPeers(set, errs)

	// Import listeners and clusterset names.
	rec := &g.rec
	rec.imports, rec.claims, rec.names, rec.failed = map[catalog.Key][]string{}, map[string]int{}, map[dns.ImportKey]dns.Import{}, map[catalog.Key]bool{}
	wantListeners := map[string]*importRoute{}
	owner := map[string]catalog.Key{}
	for _, r := range set.List(catalog.KindServiceImport) {
		imp := r.(*catalog.ServiceImport)
		route, addrs, key, name := importOf(imp)
		rec.imports[imp.Key()] = addrs
		for _, a := range addrs {
			rec.claims[a]++
			wantListeners[a], owner[a] = route, imp.Key()
		}
		rec.names[key] = name
	}
	for addr, l := range g.listeners {
		if _, ok := wantListeners[addr]; !ok {
			l.close()
			delete(g.listeners, addr)
		}
	}
	for addr, route := range wantListeners {
		if l, ok := g.listeners[addr]; ok {
			l.route.Store(route)
			continue
		}
		l, err := g.listenImport(addr, route)
		if err != nil {
			errs = append(errs, fmt.Errorf("import %s/%s: %w", route.ns, route.name, err))
			rec.failed[owner[addr]] = true
			continue
		}
		g.listeners[addr] = l
	}
	if err := g.flushSteering(); err != nil {
		errs = append(errs, err)
	}
	rec.namesErr = g.names.Set(rec.names)
	if rec.namesErr != nil {
		rec.namesErr = fmt.Errorf("dns names: %w", rec.namesErr)
	}
	return errors.Join(append(errs, rec.policyErr, rec.namesErr)...)
}

// reconcileChanges realizes changed and deleted resources; ok is false,
// with nothing done, when they need a full pass instead.
func (g *Gateway) reconcileChanges(set *catalog.Set, changed []catalog.Resource, deleted []catalog.Key) (err error, ok bool) {
	rec := &g.rec
	var policies, exports, peers bool
	exportChanges := map[nsName]*catalog.ServiceExport{} // nil: deleted
	imports := map[catalog.Key]*catalog.ServiceImport{}  // nil: deleted
	var workloads []*catalog.Workload
	var goneWorkloads []catalog.Key
	for _, k := range deleted {
		switch k.Kind {
		case catalog.KindWorkload:
			goneWorkloads = append(goneWorkloads, k)
		case catalog.KindAccessPolicy:
			policies = true
		case catalog.KindServiceExport:
			exports = true
			exportChanges[nsName{k.Namespace, k.Name}] = nil
		case catalog.KindPeer:
			peers = true
		case catalog.KindServiceImport:
			imports[k] = nil
		}
	}
	for _, r := range changed {
		switch r := r.(type) {
		case *catalog.AccessPolicy:
			policies = true
		case *catalog.ServiceExport:
			exports = true
			exportChanges[nsName{r.Metadata.Namespace, r.Metadata.Name}] = r
		case *catalog.Peer:
			peers = true
		case *catalog.ServiceImport:
			imports[r.Key()] = r
		case *catalog.Workload:
			workloads = append(workloads, r)
		}
	}
	for k := range rec.failed {
		if _, ok := imports[k]; !ok {
			if r, ok := set.Get(k); ok {
				imports[k] = r.(*catalog.ServiceImport)
			} else {
				imports[k] = nil
			}
		}
	}
	// Addresses claimed twice go to a full pass, which decides the owner.
	type plan struct {
		route *importRoute
		addrs []string
		key   dns.ImportKey
		name  dns.Import
	}
	plans := make(map[catalog.Key]plan, len(imports))
	claims := map[string]int{}
	for k, imp := range imports {
		for _, a := range rec.imports[k] {
			claims[a]--
		}
		if imp == nil {
			continue
		}
		var p plan
		p.route, p.addrs, p.key, p.name = importOf(imp)
		plans[k] = p
		for _, a := range p.addrs {
			claims[a]++
		}
	}
	for a, d := range claims {
		if rec.claims[a]+d > 1 || rec.claims[a] > 1 {
			return nil, false
		}
	}

	var errs []error
	if policies || exports {
		g.setRoutes(set, exportChanges, policies, false)
	}
	g.setWorkloads(set, workloads, goneWorkloads, false)
	if peers || rec.peersErr {
		errs = g.setPeers(set, errs)
		// A Peer's data plane decides whether streams may serve exports.
		g.setWarmTargets(g.routes.Load())
	}
	for k, imp := range imports {
		p := plans[k]
		for _, a := range rec.imports[k] {
			if rec.claims[a]--; rec.claims[a] <= 0 {
				delete(rec.claims, a)
				if !slices.Contains(p.addrs, a) {
					if l, ok := g.listeners[a]; ok {
						l.close()
						delete(g.listeners, a)
					}
				}
			}
		}
		delete(rec.failed, k)
		if imp == nil {
			delete(rec.imports, k)
			delete(rec.names, dns.ImportKey{Namespace: k.Namespace, Name: k.Name})
			continue
		}
		rec.imports[k] = p.addrs
		rec.names[p.key] = p.name
		for _, a := range p.addrs {
			rec.claims[a]++
			if l, ok := g.listeners[a]; ok {
				l.route.Store(p.route)
				continue
			}
			l, err := g.listenImport(a, p.route)
			if err != nil {
				errs = append(errs, fmt.Errorf("import %s/%s: %w", k.Namespace, k.Name, err))
				rec.failed[k] = true
				continue
			}
			g.listeners[a] = l
		}
	}
	if err := g.flushSteering(); err != nil {
		errs = append(errs, err)
	}
	if len(imports) > 0 {
		g.updateNames(imports)
	}
	return errors.Join(append(errs, rec.policyErr, rec.namesErr)...), true
}

// updateNames gives DNS the names of the imports changed (nil: deleted),
// in place: the batch's names, not all of them (rebuilding the whole table
// on every apply was a fifth of a gateway's reconcile with 16 667
// imports). After a names error (an import whose name DNS refuses) the
// whole table is set again, so the error is reported until that import
// is gone, and everything else is served once it is.
func (g *Gateway) updateNames(imports map[catalog.Key]*catalog.ServiceImport) {
	rec := &g.rec
	if rec.namesErr == nil {
		put := make(map[dns.ImportKey]dns.Import, len(imports))
		var del []dns.ImportKey
		for k, imp := range imports {
			nk := dns.ImportKey{Namespace: k.Namespace, Name: k.Name}
			if n, ok := rec.names[nk]; ok && imp != nil {
				put[nk] = n
			} else {
				del = append(del, nk)
			}
		}
		if rec.namesErr = g.names.Update(put, del); rec.namesErr == nil {
			return
		}
	}
	rec.namesErr = g.names.Set(rec.names)
	if rec.namesErr != nil {
		rec.namesErr = fmt.Errorf("dns names: %w", rec.namesErr)
	}
}

// importOf is what an import makes the gateway do: its route, the
// TCP listener addresses (each once) and its clusterset name.
func importOf(imp *catalog.ServiceImport) (*importRoute, []string, dns.ImportKey, dns.Import) {
	route := &importRoute{ns: imp.Metadata.Namespace, name: imp.Metadata.Name, clusters: imp.SourceClusters(), labels: imp.Metadata.Labels}
	var ips []netip.Addr
	var addrs []string
	for _, ipStr := range imp.Spec.IPs {
		ip, err := netip.ParseAddr(ipStr)
		if err != nil {
			continue // catalog validation already rejects this
		}
		ips = append(ips, ip)
		for _, port := range imp.Spec.Ports {
			if port.Protocol != catalog.TCP && port.Protocol != "" {
				continue // UDP ports have their own sockets (udp_egress.go)
			}
			if a := net.JoinHostPort(ip.String(), strconv.Itoa(int(port.Port))); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
	}
	var ports []dns.Port
	for _, p := range imp.Spec.Ports {
		ports = append(ports, dns.Port{Name: p.Name, Protocol: string(p.Protocol), Port: uint16(p.Port)})
	}
	return route, addrs, dns.ImportKey{Namespace: imp.Metadata.Namespace, Name: imp.Metadata.Name},
		dns.Import{Type: dns.ClusterSetIP, IPs: ips, Ports: ports}
}

// setRoutes stores new routes: with all, from the whole set; otherwise
// the current exports with changedExports put (nil: removed), and the
// policies recompiled if they changed. changedExports are the store's
// own (Set.ChangesShared): routes only read them, and copying each again
// (Set.Get) was most of this function's cost. Warm target connections follow the
// exports.
func (g *Gateway) setRoutes(set *catalog.Set, changedExports map[nsName]*catalog.ServiceExport, policies, all bool) {
	old := g.routes.Load()
	rt := &routes{exports: map[nsName]*catalog.ServiceExport{}}
	if old != nil {
		rt.policy = old.policy
	}
	if all || policies || old == nil {
		var pols []*catalog.AccessPolicy
		for _, r := range set.List(catalog.KindAccessPolicy) {
			pols = append(pols, r.(*catalog.AccessPolicy))
		}
		rt.policy, g.rec.policyErr = policy.Compile(pols)
	}
	if all || old == nil {
		for _, r := range set.List(catalog.KindServiceExport) {
			e := r.(*catalog.ServiceExport)
			rt.exports[nsName{e.Metadata.Namespace, e.Metadata.Name}] = e
		}
	} else {
		maps.Copy(rt.exports, old.exports)
		for k, e := range changedExports {
			if e != nil {
				rt.exports[k] = e
			} else {
				delete(rt.exports, k)
			}
		}
	}
	g.routes.Store(rt)
	g.setWarmTargets(rt)
}

// setWarmTargets keeps warm connections to the targets of rt's exports,
// per target (a warm connection to one port's server is no use to
// another port), while streams may use them. When every peer takes this
// gateway's exports as packets (docs/packet.md), no stream would: a warm
// connection would only hold the target, and a server that serves one
// connection at a time (iperf3) would wait on it while the clients'
// connections, arriving as packets, sat in its accept queue.
func (g *Gateway) setWarmTargets(rt *routes) {
	wantTargets := map[string]bool{}
	if g.streamsMayServeExports() {
		for _, e := range rt.exports {
			for _, t := range e.Targets() {
				wantTargets[t] = true
			}
		}
	}
	for addr, t := range g.targets {
		if !wantTargets[addr] {
			t.close()
			delete(g.targets, addr)
		}
	}
	if n := g.cfg.preconnect(); n > 0 {
		for addr := range wantTargets {
			if _, ok := g.targets[addr]; !ok {
				t := newPreconnector(addr, n, g.lanCC, g.log)
				g.targets[addr] = t
				g.spawn(func() { t.run(g.ctx) })
			}
		}
	}
}

// setPeers makes the peer pools match the set's Peers; a pool that does
// not start is retried by the next reconcile.
func (g *Gateway) setPeers(set *catalog.Set, errs []error) []error {
	wantPeers := map[string][]string{}
	for _, r := range set.List(catalog.KindPeer) {
		p := r.(*catalog.Peer)
		if p.Metadata.Name == g.cfg.Cluster {
			continue
		}
		wantPeers[p.Metadata.Name] = p.Spec.Gateways
	}
	for id, p := range g.peers {
		if addrs, ok := wantPeers[id]; !ok || !slices.Equal(addrs, p.addrs) {
			p.cancel()
			p.pool.Close()
			delete(g.peers, id)
		}
	}
	g.rec.peersErr = false
	for id, addrs := range wantPeers {
		if _, ok := g.peers[id]; ok {
			continue
		}
		p, err := g.newPeer(id, addrs)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", id, err))
			g.rec.peersErr = true
			continue
		}
		g.peers[id] = p
	}
	return errs
}

func (g *Gateway) newPeer(id string, addrs []string) (*peer, error) {
	tr, err := g.transport(g.id.ClientTLS(id), nil, g.metrics.rttObserver(id))
	if err != nil {
		return nil, err
	}
	pc := tunnel.PoolConfig{Transport: tr, Peer: id, Addrs: addrs, SessionsPerAddr: g.cfg.Sessions, ProbeMisses: g.cfg.probeMisses(), Logger: g.log,
		OnHeard: g.kickReach}
	if g.cfg.Transport != TransportQUIC {
		// Only the multiplexer counts received frames, which silence
		// detection reads; QUIC sessions are judged by their end alone.
		pc.ProbeInterval = g.cfg.probeInterval()
	}
	pool, err := tunnel.NewPool(pc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(g.ctx)
	g.spawn(func() {
		if err := pool.Run(ctx); ignoreClosed(err) != nil {
			g.log.Warn("peer pool ended", "peer", id, "err", err)
		}
	})
	return &peer{addrs: slices.Clone(addrs), pool: pool, cancel: cancel}, nil
}

// transport makes the configured transport, for dialing one peer (client
// set) or for listening (server set); onRTT receives the TLS sessions'
// round-trip samples.
func (g *Gateway) transport(client, server *tls.Config, onRTT func(time.Duration)) (tunnel.Transport, error) {
	if g.cfg.Transport == TransportQUIC {
		return quic.New(quic.Config{ClientTLS: client, ServerTLS: server, PeerIdentity: g.id.PeerCluster,
			KeepaliveInterval: g.cfg.probeInterval(), KeepaliveTimeout: g.cfg.KeepaliveTimeout, Logger: g.log,
			MaxIncomingStreams: int(g.limit.max)})
	}
	return tunnel.NewTLS(tunnel.Config{ClientTLS: client, ServerTLS: server, PeerIdentity: g.id.PeerCluster,
		Congestion: g.cfg.Congestion, KeepaliveInterval: g.cfg.probeInterval(), KeepaliveTimeout: g.cfg.KeepaliveTimeout, OnRTT: onRTT, Logger: g.log,
		// The gateway's own limit (limit.go) decides, with a reason and a
		// count; the tunnel's default (4096 a session) refused streams
		// far below it.
		MaxIncomingStreams: int(g.limit.max)})
}

// attachInbound lets the pool to the session's peer count the requests it
// carries as signs of life of the peer gateway that dialed it, so the pool
// does not probe that gateway over its own idle sessions
// (docs/failover.md, "What the probes cost"). A session the pool cannot
// map to one of the peer's gateways, or of a peer configured later, is
// left out: the pool then probes as before.
func (g *Gateway) attachInbound(s tunnel.Session) {
	p := g.peer(s.Peer())
	if p == nil || p.Attach(s) {
		return
	}
	g.log.Debug("accepted session not mapped to a peer gateway: its pool keeps probing", "peer", s.Peer())
}

func (g *Gateway) peer(id string) *tunnel.Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.peers[id]; ok {
		return p.pool
	}
	return nil
}
