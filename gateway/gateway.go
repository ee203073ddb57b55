// Package gateway is strait's data plane: one process per gateway node of a
// cluster. It listens on the addresses of the cluster's imports, carries
// each client connection as a stream over a warm mutually authenticated
// session to a gateway of the exporting cluster, and there connects it to
// the export's target. Policies are checked on both ends; the resources
// that drive it (Peer, ServiceExport, ServiceImport, AccessPolicy) arrive
// through the local admin API and survive restarts.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/dns"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/health"
	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/quic"
)

// Gateway is one running gateway. Create it with New, then Run it.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	id      *fabric.Identity
	store   *catalog.Store
	metrics *metrics
	names   *dns.Static

	routes atomic.Pointer[routes]

	mu        sync.Mutex // guards everything below, and serializes reconcile
	ctx       context.Context
	peers     map[string]*peer           // cluster ID → its pool
	listeners map[string]*importListener // "ip:port" → listener
	targets   map[string]*preconnector   // target address → warm connections
	wg        sync.WaitGroup             // every goroutine the gateway starts
	wan       tunnel.Listener
	closeOnce sync.Once
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
	}
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

	server, err := g.transport(nil, mutualServerTLS(g.id))
	if err != nil {
		return err
	}
	if g.wan, err = server.Listen(g.cfg.listen()); err != nil {
		return fmt.Errorf("listen for peer gateways: %w", err)
	}
	g.log.Info("gateway listening", "wan", g.wan.Addr().String(), "admin", g.cfg.admin())
	errc := make(chan error, 5)
	g.spawn(func() { errc <- ignoreClosed(g.id.Run(ctx)) })
	if err := g.reconcile(); err != nil {
		g.log.Warn("resources not fully applied", "err", err)
	}
	// Sessions are accepted only now, with the exports in place: a
	// restarted gateway's first streams would otherwise be refused as
	// unknown exports. Peers that dialed meanwhile wait in the backlog.
	g.spawn(func() { errc <- ignoreClosed(g.acceptSessions(ctx)) })
	if _, err := g.serveAdmin(ctx); err != nil {
		cancel()
		g.shutdown()
		return err
	}
	if g.cfg.DNS != "" {
		srv, err := dns.New(dns.Config{Listen: g.cfg.DNS, Imports: g.names, Logger: g.log})
		if err != nil {
			cancel()
			g.shutdown()
			return fmt.Errorf("dns: %w", err)
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
	if g.cfg.Health != "" {
		// Last, so that a prober sees the gateway live only once it
		// serves its imports.
		h, err := health.NewResponder(health.ResponderConfig{Addr: g.cfg.Health})
		if err != nil {
			cancel()
			g.shutdown()
			return err
		}
		g.spawn(func() { errc <- h.Run(ctx) })
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
		for k, p := range g.peers {
			p.cancel()
			p.pool.Close()
			delete(g.peers, k)
		}
		for k, t := range g.targets {
			t.close()
			delete(g.targets, k)
		}
		g.mu.Unlock()
	})
	g.wg.Wait()
}

// mutualServerTLS requires a client certificate: the fabric verifies it
// (and classifies failures) in VerifyConnection; requiring one here keeps a
// certificate-less client from ever getting a session.
func mutualServerTLS(id *fabric.Identity) *tls.Config {
	c := id.ServerTLS()
	c.ClientAuth = tls.RequireAnyClientCert
	return c
}

// reconcile makes listeners, peer pools, warm target connections and DNS
// names match the resources in the store.
func (g *Gateway) reconcile() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil || g.ctx.Err() != nil {
		return nil
	}
	set := g.store.Set()
	var errs []error

	// Policies and exports: a new immutable routes value.
	var pols []*catalog.AccessPolicy
	for _, r := range set.List(catalog.KindAccessPolicy) {
		pols = append(pols, r.(*catalog.AccessPolicy))
	}
	ev, err := policy.Compile(pols)
	if err != nil {
		errs = append(errs, err)
	}
	rt := &routes{exports: map[nsName]*catalog.ServiceExport{}, policy: ev}
	wantTargets := map[string]bool{}
	for _, r := range set.List(catalog.KindServiceExport) {
		e := r.(*catalog.ServiceExport)
		rt.exports[nsName{e.Metadata.Namespace, e.Metadata.Name}] = e
		if e.Spec.Target != "" {
			wantTargets[e.Spec.Target] = true
		}
	}
	g.routes.Store(rt)

	// Warm connections to export targets.
	for addr, t := range g.targets {
		if !wantTargets[addr] {
			t.close()
			delete(g.targets, addr)
		}
	}
	if n := g.cfg.preconnect(); n > 0 {
		for addr := range wantTargets {
			if _, ok := g.targets[addr]; !ok {
				t := newPreconnector(addr, n, g.log)
				g.targets[addr] = t
				g.spawn(func() { t.run(g.ctx) })
			}
		}
	}

	// Peer pools.
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
	for id, addrs := range wantPeers {
		if _, ok := g.peers[id]; ok {
			continue
		}
		p, err := g.newPeer(id, addrs)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", id, err))
			continue
		}
		g.peers[id] = p
	}

	// Import listeners and clusterset names.
	wantListeners := map[string]*importRoute{}
	names := map[dns.ImportKey]dns.Import{}
	for _, r := range set.List(catalog.KindServiceImport) {
		imp := r.(*catalog.ServiceImport)
		route := &importRoute{ns: imp.Metadata.Namespace, name: imp.Metadata.Name, clusters: imp.SourceClusters(), labels: imp.Metadata.Labels}
		var ips []netip.Addr
		for _, ipStr := range imp.Spec.IPs {
			ip, err := netip.ParseAddr(ipStr)
			if err != nil {
				continue // catalog validation already rejects this
			}
			ips = append(ips, ip)
			for _, port := range imp.Spec.Ports {
				wantListeners[net.JoinHostPort(ip.String(), strconv.Itoa(int(port.Port)))] = route
			}
		}
		var ports []dns.Port
		for _, p := range imp.Spec.Ports {
			ports = append(ports, dns.Port{Name: p.Name, Protocol: string(p.Protocol), Port: uint16(p.Port)})
		}
		names[dns.ImportKey{Namespace: imp.Metadata.Namespace, Name: imp.Metadata.Name}] = dns.Import{Type: dns.ClusterSetIP, IPs: ips, Ports: ports}
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
			continue
		}
		g.listeners[addr] = l
	}
	if err := g.names.Set(names); err != nil {
		errs = append(errs, fmt.Errorf("dns names: %w", err))
	}
	return errors.Join(errs...)
}

func (g *Gateway) newPeer(id string, addrs []string) (*peer, error) {
	tr, err := g.transport(g.id.ClientTLS(id), nil)
	if err != nil {
		return nil, err
	}
	pc := tunnel.PoolConfig{Transport: tr, Peer: id, Addrs: addrs, SessionsPerAddr: g.cfg.Sessions, ProbeMisses: g.cfg.probeMisses(), Logger: g.log}
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
// set) or for listening (server set).
func (g *Gateway) transport(client, server *tls.Config) (tunnel.Transport, error) {
	if g.cfg.Transport == TransportQUIC {
		return quic.New(quic.Config{ClientTLS: client, ServerTLS: server, PeerIdentity: g.id.PeerCluster,
			KeepaliveInterval: g.cfg.probeInterval(), KeepaliveTimeout: g.cfg.KeepaliveTimeout, Logger: g.log})
	}
	return tunnel.NewTLS(tunnel.Config{ClientTLS: client, ServerTLS: server, PeerIdentity: g.id.PeerCluster,
		Congestion: g.cfg.Congestion, KeepaliveInterval: g.cfg.probeInterval(), KeepaliveTimeout: g.cfg.KeepaliveTimeout, Logger: g.log})
}

func (g *Gateway) peer(id string) *tunnel.Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.peers[id]; ok {
		return p.pool
	}
	return nil
}
