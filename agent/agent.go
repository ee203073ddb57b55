// Package agent is a cluster's agent in standalone mode: it publishes the
// cluster's exports and gateway addresses to the broker layer and turns
// the clusterset catalog into Peer and ServiceImport resources on the
// cluster's gateway.
//
// Exports come from the gateway's admin API (polled by revision) or from
// a file. Imports get addresses from a configured prefix, chosen by a hash
// of namespace/name with linear probing; once applied, an import keeps its
// address for as long as it exists (the agent reads the addresses back
// from the gateway when it restarts). Everything the agent applies carries
// the label strait.dev/managed-by=agent and nothing else is touched. When
// every broker is down the gateway keeps its resources (they are persisted
// there) and forwards on the last known catalog; the agent keeps polling
// and publishes what changed when a broker is back.
package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
)

// ManagedBy marks the resources the agent owns on the gateway.
const (
	ManagedByLabel = "strait.dev/managed-by"
	ManagedByValue = "agent"
)

// Agent is one running agent. Create it with New, then Run it.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	id     *fabric.Identity
	client *broker.Client
	admin  *gateway.AdminClient

	mu     sync.Mutex
	remote map[string]*remoteCluster // cluster → what it publishes
	dirty  chan struct{}             // the catalog changed: reconcile imports
	// What changed since the importer last looked, so it recomputes only
	// those imports: changedAll after a snapshot or a gateway change
	// (which touches every import of a cluster), else the export keys.
	changedKeys map[string]bool
	changedAll  bool
	trace       *bufio.Writer
	traceBuf    []byte // one trace line, reused
	traceF      *os.File
	closeMu     sync.Mutex
	cancel      context.CancelFunc
	closed      bool
}

type remoteCluster struct {
	gateways []broker.Gateway
	exports  map[string]broker.Export
}

// New loads the identity and prepares the broker client; it opens no
// connection yet.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := fabric.Load(fabric.Config{Dir: cfg.Identity.Dir, Cluster: cfg.Cluster,
		CertFile: cfg.Identity.Cert, KeyFile: cfg.Identity.Key, CAFile: cfg.Identity.CA, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	a := &Agent{cfg: cfg, log: log.With("cluster", cfg.Cluster), id: id, remote: map[string]*remoteCluster{}, dirty: make(chan struct{}, 1)}
	if cfg.Gateway != "" {
		a.admin = gateway.NewAdminClient(cfg.Gateway)
	}
	if cfg.Trace != "" {
		f, err := os.OpenFile(cfg.Trace, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		a.traceF, a.trace = f, bufio.NewWriterSize(f, 1<<20)
	}
	a.client, err = broker.NewClient(broker.ClientConfig{
		Brokers: cfg.Brokers, TLS: id.BrokerClientTLS(), Cluster: cfg.Cluster,
		OnUpdate: a.onUpdate, OnConnect: a.onConnect, Logger: a.log,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Client returns the agent's broker client (for status and tests).
func (a *Agent) Client() *broker.Client { return a.client }

// Run publishes and imports until ctx is done or Close; it returns after
// every goroutine exited.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.closeMu.Lock()
	if a.closed {
		a.closeMu.Unlock()
		return nil
	}
	a.cancel = cancel
	a.closeMu.Unlock()
	defer a.closeTrace()

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	run := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}()
	}
	run(func(ctx context.Context) error { return a.id.Run(ctx) })
	run(a.client.Run)
	run(a.publishLoop)
	if a.cfg.ImportPrefix != "" {
		imp, err := newImporter(a)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		run(imp.run)
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Close stops Run; it is idempotent.
func (a *Agent) Close() error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if !a.closed {
		a.closed = true
		if a.cancel != nil {
			a.cancel()
		}
	}
	return a.client.Close()
}

func (a *Agent) closeTrace() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace != nil {
		st := a.client.Stats()
		fmt.Fprintf(a.trace, "%d stats %d %d %d\n", time.Now().UnixNano(), st.BytesIn, st.BytesOut, st.Connects)
		a.trace.Flush()
		a.traceF.Close()
		a.trace = nil
	}
}

// onConnect records broker sessions in the trace (failover experiments).
func (a *Agent) onConnect(b string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace != nil {
		fmt.Fprintf(a.trace, "%d connect %s\n", time.Now().UnixNano(), b)
		a.trace.Flush()
	}
}

// onUpdate folds the catalog into the agent's view of remote clusters,
// which only the importer reads: without one the agent keeps no second
// copy of the catalog (the broker client has one).
func (a *Agent) onUpdate(u broker.Update) {
	now := time.Now().UnixNano()
	a.mu.Lock()
	track := a.cfg.ImportPrefix != ""
	if u.Snapshot {
		a.changedAll = true
		a.remote = map[string]*remoteCluster{}
		for id, st := range u.Catalog.Clusters {
			if id == a.cfg.Cluster {
				continue
			}
			if track {
				rc := &remoteCluster{gateways: st.Gateways, exports: make(map[string]broker.Export, len(st.Exports))}
				for _, e := range st.Exports {
					rc.exports[e.Key()] = e
				}
				a.remote[id] = rc
			}
			for _, e := range st.Exports {
				a.traceLocked(now, "put", id, e)
			}
		}
	}
	for _, ch := range u.Changes {
		if ch.Cluster == a.cfg.Cluster {
			continue
		}
		if ch.Export != nil {
			if ch.Deleted {
				a.traceLocked(now, "del", ch.Cluster, *ch.Export)
			} else {
				a.traceLocked(now, "put", ch.Cluster, *ch.Export)
			}
		}
		if !track {
			continue
		}
		rc := a.remote[ch.Cluster]
		if rc == nil {
			rc = &remoteCluster{exports: map[string]broker.Export{}}
			a.remote[ch.Cluster] = rc
		}
		switch {
		case ch.Export == nil:
			rc.gateways = ch.Gateways
			a.changedAll = true
		case ch.Deleted:
			delete(rc.exports, ch.Export.Key())
		default:
			rc.exports[ch.Export.Key()] = *ch.Export
		}
		if ch.Export != nil && !a.changedAll {
			if a.changedKeys == nil {
				a.changedKeys = map[string]bool{}
			}
			a.changedKeys[ch.Export.Key()] = true
		}
	}
	if a.trace != nil {
		a.trace.Flush()
	}
	a.mu.Unlock()
	if track {
		select {
		case a.dirty <- struct{}{}:
		default:
		}
	}
}

// traceLocked writes "<ns> <what> <cluster> <namespace>/<name>" to the
// trace, if any, without fmt: it runs for every export received.
func (a *Agent) traceLocked(now int64, what, cluster string, e broker.Export) {
	if a.trace == nil {
		return
	}
	b := a.traceBuf[:0]
	b = strconv.AppendInt(b, now, 10)
	b = append(b, ' ')
	b = append(b, what...)
	b = append(b, ' ')
	b = append(b, cluster...)
	b = append(b, ' ')
	b = append(b, e.Namespace...)
	b = append(b, '/')
	b = append(b, e.Name...)
	b = append(b, '\n')
	a.trace.Write(b)
	a.traceBuf = b
}

// publishLoop publishes the cluster's state whenever its source changes
// (and once at start); Publish itself waits out broker outages.
func (a *Agent) publishLoop(ctx context.Context) error {
	if a.admin != nil {
		return a.followGateway(ctx)
	}
	t := time.NewTicker(a.cfg.poll())
	defer t.Stop()
	var lastMod time.Time
	var lastSize int64
	published := false
	traced := map[string]bool{} // exports whose publish start is in the trace
	lastErr := ""
	for {
		st, changed, err := a.readFile(&lastMod, &lastSize)
		if err != nil {
			if err.Error() != lastErr { // once per distinct problem, not every poll
				a.log.Warn("reading exports", "err", err)
				lastErr = err.Error()
			}
		} else if changed || !published {
			lastErr = ""
			a.tracePublish(st, traced)
			if _, err := a.client.Publish(ctx, st); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				a.log.Warn("publish", "err", err)
			} else {
				published = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// healthEvery is how often the agent asks its gateway for its status (its
// WAN address and whether it answers at all) while nothing changes.
const healthEvery = time.Second

// followGateway follows the gateway's exports by deltas (the admin API's
// watch: only what changed since the last revision, long-polled) and
// publishes after every change, so the cost of a change does not grow
// with the number of exports the gateway holds. Changes that arrive while
// a publish is in flight are coalesced into the next one.
//
// Health: a gateway is published healthy while its admin API answers. The
// gateway opens its WAN listener, reconciles its resources and accepts
// peer sessions before it serves the admin socket, so an answer means it
// is up and forwarding; after a failed call its addresses are published
// unhealthy (remote agents then prefer other gateways of the cluster, or
// keep them when none is healthy) until it answers again.
func (a *Agent) followGateway(ctx context.Context) error {
	exports := map[string]broker.Export{}
	traced := map[string]bool{}
	var since uint64
	var wan string
	healthy, synced, dirty := false, false, true
	var lastStatus time.Time
	lastErr := ""
	fail := func(what string, err error) {
		if err.Error() != lastErr { // once per distinct problem, not every poll
			a.log.Warn(what, "err", err)
			lastErr = err.Error()
		}
		if healthy {
			healthy, dirty = false, true
		}
	}
	for ctx.Err() == nil {
		if time.Since(lastStatus) >= healthEvery || wan == "" {
			s, err := a.admin.Health()
			if err != nil {
				fail("gateway status", err)
			} else {
				lastStatus = time.Now()
				if s.WAN != wan || !healthy {
					wan, healthy, dirty = s.WAN, true, true
				}
			}
		}
		if healthy {
			wait := healthEvery
			if dirty && synced {
				wait = 0 // publish what is pending first
			}
			w, err := a.admin.WatchExports(ctx, since, wait)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fail("watching exports", err)
			} else {
				lastErr = ""
				if w.Reset {
					clear(exports)
				}
				for _, se := range w.Changed {
					e := broker.ExportOf(se)
					exports[e.Key()] = e
				}
				for _, k := range w.Deleted {
					ns := k.Namespace
					if ns == "" {
						ns = "default"
					}
					delete(exports, ns+"/"+k.Name)
				}
				if w.Reset || len(w.Changed) > 0 || len(w.Deleted) > 0 {
					dirty = true
				}
				since, synced = w.Revision, true
			}
		}
		if dirty && synced && wan != "" {
			st, err := a.clusterState(exports, wan, healthy)
			if err != nil {
				fail("gateway address", err)
			} else {
				a.tracePublish(st, traced)
				if _, err := a.client.Publish(ctx, st); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					a.log.Warn("publish", "err", err)
				} else {
					dirty = false
				}
			}
		}
		if !healthy || (dirty && synced) {
			select { // do not spin on a gateway or broker that fails at once
			case <-ctx.Done():
			case <-time.After(a.cfg.poll()):
			}
		}
	}
	return nil
}

// clusterState is what the agent publishes for the exports it follows.
func (a *Agent) clusterState(exports map[string]broker.Export, wan string, healthy bool) (broker.ClusterState, error) {
	var st broker.ClusterState
	gws := a.cfg.Gateways
	if len(gws) == 0 {
		host, _, err := net.SplitHostPort(wan)
		if ip, perr := netip.ParseAddr(host); err != nil || perr == nil && ip.IsUnspecified() {
			return st, fmt.Errorf("gateway listens on %q, which peers cannot dial: set gateways in the agent config", wan)
		}
		gws = []string{wan}
	}
	st.Exports = make([]broker.Export, 0, len(exports))
	for _, e := range exports {
		st.Exports = append(st.Exports, e)
	}
	for _, g := range gws {
		st.Gateways = append(st.Gateways, broker.Gateway{Addr: g, Healthy: healthy})
	}
	return st, nil
}

// tracePublish records when each export was first handed to the broker
// client, so experiments can tell the broker layer's share of the latency
// from the export source's.
func (a *Agent) tracePublish(st broker.ClusterState, traced map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace == nil {
		return
	}
	now := time.Now().UnixNano()
	for _, e := range st.Exports {
		if !traced[e.Key()] {
			traced[e.Key()] = true
			fmt.Fprintf(a.trace, "%d pub %s\n", now, e.Key())
		}
	}
	a.trace.Flush()
}

// readFile reads the exports file if it changed since the stamps given
// (which it updates).
func (a *Agent) readFile(lastMod *time.Time, lastSize *int64) (broker.ClusterState, bool, error) {
	var st broker.ClusterState
	fi, err := os.Stat(a.cfg.Exports)
	if err != nil {
		return st, false, err
	}
	if fi.ModTime().Equal(*lastMod) && fi.Size() == *lastSize {
		return st, false, nil
	}
	data, err := os.ReadFile(a.cfg.Exports)
	if err != nil {
		return st, false, err
	}
	rs, err := catalog.Parse(bytes.NewReader(data))
	if err != nil {
		return st, false, fmt.Errorf("%s: %w", a.cfg.Exports, err)
	}
	*lastMod, *lastSize = fi.ModTime(), fi.Size()
	for _, r := range rs {
		se, ok := r.(*catalog.ServiceExport)
		if !ok {
			return st, false, fmt.Errorf("%s: %s: only ServiceExport belongs in an exports file", a.cfg.Exports, r.Key())
		}
		st.Exports = append(st.Exports, broker.ExportOf(se))
	}
	for _, g := range a.cfg.Gateways {
		// No gateway to ask: the configured addresses are published
		// healthy, and peers' own probes decide per session.
		st.Gateways = append(st.Gateways, broker.Gateway{Addr: g, Healthy: true})
	}
	return st, true, nil
}
