package k8s

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/broker"
)

// Clusterset is what the controller needs from the broker layer.
//
// Contract: Publish replaces this cluster's published state and is
// idempotent; it may block while no broker is reachable, until ctx ends.
// Catalog returns the latest view of every cluster's state (including this
// cluster's, as last published and echoed back) and false until a first
// view arrived — the controller deletes nothing imported before then, so a
// restart with a slow broker changes nothing. Changed receives a value
// (coalesced) after every change of the view.
type Clusterset interface {
	Publish(ctx context.Context, st broker.ClusterState) error
	Catalog() (*broker.Catalog, bool)
	Changed() <-chan struct{}
}

// Labels on a published broker.Export that carry what the MCS conflict
// rules need and broker.Export has no field for. They are stripped again on
// the receiving side.
const (
	createdLabel = "export.strait.dev/created" // unix seconds of the ServiceExport's creation
	maxCreated   = 1 << 40                     // unix seconds: later timestamps are not believed
	typeLabel    = "export.strait.dev/type"    // ClusterSetIP or Headless
)

// brokerExport turns a local export into what the broker publishes.
func brokerExport(e ClusterExport) broker.Export {
	return broker.Export{
		Namespace: e.Namespace, Name: e.Name, Ports: e.Ports,
		Labels: map[string]string{createdLabel: strconv.FormatInt(e.Created.Unix(), 10), typeLabel: string(e.Type)},
	}
}

// clusterExports lists the catalog's exports of every cluster.
func clusterExports(c *broker.Catalog) []ClusterExport {
	var out []ClusterExport
	for _, id := range c.ClusterIDs() {
		for _, e := range c.Clusters[id].Exports {
			ce := ClusterExport{Cluster: id, Namespace: e.Namespace, Name: e.Name, Ports: e.Ports, Type: mcs.ClusterSetIP}
			if t := e.Labels[typeLabel]; t == string(mcs.Headless) {
				ce.Type = mcs.Headless
			}
			// A missing, bad or out-of-range timestamp sorts as the newest
			// possible export: an export that cannot prove its age does
			// not win. Kubernetes cannot create anything before 1970 or
			// 30 000 years from now, so such a label is not believed.
			ce.Created = time.Unix(maxCreated, 0)
			if s, err := strconv.ParseInt(e.Labels[createdLabel], 10, 64); err == nil && s >= 0 && s < maxCreated {
				ce.Created = time.Unix(s, 0)
			}
			out = append(out, ce)
		}
	}
	return out
}

// Hub is an in-memory clusterset for tests: every Member shares one
// catalog. It follows Clusterset's contract, including the echo of a
// cluster's own state.
type Hub struct {
	mu      sync.Mutex
	rev     uint64
	states  map[string]*broker.ClusterState
	members []*member
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{states: map[string]*broker.ClusterState{}} }

type member struct {
	hub     *Hub
	cluster string
	changed chan struct{}
}

// Member returns the Clusterset of one cluster.
func (h *Hub) Member(cluster string) Clusterset {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := &member{hub: h, cluster: cluster, changed: make(chan struct{}, 1)}
	h.members = append(h.members, m)
	return m
}

// Remove deletes a cluster's state, as a broker does when a cluster leaves.
func (h *Hub) Remove(cluster string) {
	h.mu.Lock()
	delete(h.states, cluster)
	h.rev++
	h.mu.Unlock()
	h.notify()
}

func (h *Hub) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.members {
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}
}

func (m *member) Publish(ctx context.Context, st broker.ClusterState) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, e := range st.Exports {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	h := m.hub
	h.mu.Lock()
	h.states[m.cluster] = &st
	h.rev++
	h.mu.Unlock()
	h.notify()
	return nil
}

func (m *member) Catalog() (*broker.Catalog, bool) {
	h := m.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return &broker.Catalog{Revision: h.rev, Clusters: maps.Clone(h.states)}, true
}

func (m *member) Changed() <-chan struct{} { return m.changed }

// BrokerClusterset is a Clusterset on a real broker client.
type BrokerClusterset struct {
	client  *broker.Client
	changed chan struct{}
}

// NewBrokerClusterset makes a broker client from cfg (its OnUpdate is
// taken over) and wraps it; start it with Run.
func NewBrokerClusterset(cfg broker.ClientConfig) (*BrokerClusterset, error) {
	b := &BrokerClusterset{changed: make(chan struct{}, 1)}
	cfg.OnUpdate = func(broker.Update) {
		select {
		case b.changed <- struct{}{}:
		default:
		}
	}
	c, err := broker.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	b.client = c
	return b, nil
}

// Run runs the broker client until ctx ends.
func (b *BrokerClusterset) Run(ctx context.Context) error { return b.client.Run(ctx) }

// Close stops Run; it is idempotent.
func (b *BrokerClusterset) Close() error { return b.client.Close() }

// Publish implements Clusterset.
func (b *BrokerClusterset) Publish(ctx context.Context, st broker.ClusterState) error {
	_, err := b.client.Publish(ctx, st)
	return err
}

// Catalog implements Clusterset.
func (b *BrokerClusterset) Catalog() (*broker.Catalog, bool) { return b.client.Catalog() }

// Changed implements Clusterset.
func (b *BrokerClusterset) Changed() <-chan struct{} { return b.changed }

// sortedGateways returns the addresses of a cluster's healthy gateways,
// sorted (all of them if none is marked healthy: a peer's health view is
// advisory, and the gateway's own probes decide).
func sortedGateways(gws []broker.Gateway) []string {
	var healthy, all []string
	for _, g := range gws {
		all = append(all, g.Addr)
		if g.Healthy {
			healthy = append(healthy, g.Addr)
		}
	}
	if len(healthy) > 0 {
		all = healthy
	}
	sort.Strings(all)
	return all
}
