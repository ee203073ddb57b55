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

	mu      sync.Mutex
	remote  map[string]*remoteCluster // cluster → what it publishes
	dirty   chan struct{}             // the catalog changed: reconcile imports
	trace   *bufio.Writer
	traceF  *os.File
	closeMu sync.Mutex
	cancel  context.CancelFunc
	closed  bool
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
		Brokers: cfg.Brokers, TLS: id.ClientTLS(""), Cluster: cfg.Cluster,
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

// onUpdate folds the catalog into the agent's view of remote clusters.
func (a *Agent) onUpdate(u broker.Update) {
	now := time.Now().UnixNano()
	a.mu.Lock()
	if u.Snapshot {
		a.remote = map[string]*remoteCluster{}
		for id, st := range u.Catalog.Clusters {
			if id == a.cfg.Cluster {
				continue
			}
			rc := &remoteCluster{gateways: st.Gateways, exports: make(map[string]broker.Export, len(st.Exports))}
			for _, e := range st.Exports {
				rc.exports[e.Key()] = e
				if a.trace != nil {
					fmt.Fprintf(a.trace, "%d put %s %s\n", now, id, e.Key())
				}
			}
			a.remote[id] = rc
		}
	}
	for _, ch := range u.Changes {
		if ch.Cluster == a.cfg.Cluster {
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
		case ch.Deleted:
			delete(rc.exports, ch.Export.Key())
			if a.trace != nil {
				fmt.Fprintf(a.trace, "%d del %s %s\n", now, ch.Cluster, ch.Export.Key())
			}
		default:
			rc.exports[ch.Export.Key()] = *ch.Export
			if a.trace != nil {
				fmt.Fprintf(a.trace, "%d put %s %s\n", now, ch.Cluster, ch.Export.Key())
			}
		}
	}
	if a.trace != nil {
		a.trace.Flush()
	}
	a.mu.Unlock()
	select {
	case a.dirty <- struct{}{}:
	default:
	}
}

// publishLoop publishes the cluster's state whenever its source changes
// (and once at start); Publish itself waits out broker outages.
func (a *Agent) publishLoop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.poll())
	defer t.Stop()
	var lastRev uint64
	var lastMod time.Time
	var lastSize int64
	published := false
	traced := map[string]bool{} // exports whose publish start is in the trace
	lastErr := ""
	for {
		st, changed, err := a.readState(&lastRev, &lastMod, &lastSize)
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

// readState reads the exports and gateways if the source changed since
// the stamps given (which it updates).
func (a *Agent) readState(lastRev *uint64, lastMod *time.Time, lastSize *int64) (broker.ClusterState, bool, error) {
	var st broker.ClusterState
	var rs []catalog.Resource
	gws := a.cfg.Gateways
	if a.admin != nil {
		s, err := a.admin.Status()
		if err != nil {
			return st, false, err
		}
		if s.Revision == *lastRev && *lastRev != 0 {
			return st, false, nil
		}
		if rs, err = a.admin.List(string(catalog.KindServiceExport)); err != nil {
			return st, false, err
		}
		*lastRev = s.Revision
		if len(gws) == 0 {
			host, _, err := net.SplitHostPort(s.WAN)
			if ip, perr := netip.ParseAddr(host); err != nil || perr == nil && ip.IsUnspecified() {
				return st, false, fmt.Errorf("gateway listens on %q, which peers cannot dial: set gateways in the agent config", s.WAN)
			}
			gws = []string{s.WAN}
		}
	} else {
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
		if rs, err = catalog.Parse(bytes.NewReader(data)); err != nil {
			return st, false, fmt.Errorf("%s: %w", a.cfg.Exports, err)
		}
		*lastMod, *lastSize = fi.ModTime(), fi.Size()
	}
	for _, r := range rs {
		if se, ok := r.(*catalog.ServiceExport); ok {
			st.Exports = append(st.Exports, broker.ExportOf(se))
		} else if a.admin == nil {
			return st, false, fmt.Errorf("%s: %s: only ServiceExport belongs in an exports file", a.cfg.Exports, r.Key())
		}
	}
	for _, g := range gws {
		// The agent reaches its gateway (or has no gateway to check):
		// healthy. Peers' own probes decide per session.
		st.Gateways = append(st.Gateways, broker.Gateway{Addr: g, Healthy: true})
	}
	return st, true, nil
}
