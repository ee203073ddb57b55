package broker

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/strait-net/strait/placement"
)

// How agents find their broker. Every live broker holds an ephemeral
// entry b/<id> with its address, so the broker set is in the catalog
// stream itself. Brokers keep an RBCM assignment of clusters to brokers
// in the entry "assign": when the live brokers or the publishing clusters
// change, a broker recomputes it with placement.Remap (minimal churn from
// the stored one) and writes it with a compare-and-swap on its revision, so
// one broker's computation wins and all agents read the same mapping.
// Agents connect to their assigned broker and move when the assignment
// changes. An agent whose broker dies does not wait for the lease to
// expire and the assignment to follow: it moves at once to the live broker
// that rendezvous hashing of its cluster ID picks among the others
// (Fallback), so failover costs one dial; when the new assignment
// arrives it settles there.

// placementLoop keeps the stored assignment up to date until ctx is done.
func (s *Server) placementLoop(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.followAssignment(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("assignment loop restarting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// assignView is what the assignment depends on.
type assignView struct {
	brokers   map[string]bool
	clusters  map[string]bool
	exports   map[string]map[string]bool // cluster → its exports, the demand
	stored    assignment
	storedRev uint64
}

func (v *assignView) apply(e Entry) {
	kind, id, _ := parseKey(e.Key)
	del := e.Value == nil
	switch kind {
	case kindBroker:
		if del {
			delete(v.brokers, id)
		} else {
			v.brokers[id] = true
		}
	case kindMeta:
		if del {
			delete(v.clusters, id)
		} else {
			v.clusters[id] = true
		}
	case kindExport:
		_, _, nsName := parseKey(e.Key)
		if del {
			delete(v.exports[id], nsName)
		} else {
			if v.exports[id] == nil {
				v.exports[id] = map[string]bool{}
			}
			v.exports[id][nsName] = true
		}
	case kindAssign:
		v.storedRev = e.ModRev
		v.stored = assignment{}
		if !del {
			_ = json.Unmarshal(e.Value, &v.stored)
		}
		if del {
			v.storedRev = 0
		}
	}
}

// stale reports whether the stored assignment no longer fits the view.
func (v *assignView) stale() bool {
	if len(v.brokers) == 0 {
		return false
	}
	if !slices.Equal(v.stored.Brokers, sortedKeys(v.brokers)) {
		return true
	}
	for c := range v.clusters {
		if _, ok := v.stored.Clusters[c]; !ok {
			return true
		}
	}
	return len(v.stored.Clusters) != len(v.clusters)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// compute returns the new assignment: RBCM on a fresh view, Remap from
// the stored one otherwise. Each cluster is its own tenant (K = 1) whose
// demand is 1 + its number of exports.
func (v *assignView) compute() (assignment, error) {
	m := &placement.Model{K: 1}
	brokers := sortedKeys(v.brokers)
	for _, b := range brokers {
		m.Brokers = append(m.Brokers, placement.Broker{ID: b, Capacity: 1})
	}
	for _, c := range sortedKeys(v.clusters) {
		m.Clusters = append(m.Clusters, placement.Cluster{ID: c})
		m.Tenants = append(m.Tenants, placement.Tenant{ID: c, VPCs: []placement.VPC{{ID: c, Cluster: c, Demand: float64(1 + len(v.exports[c]))}}})
	}
	out := assignment{Brokers: brokers, Clusters: map[string]string{}}
	if len(m.Clusters) == 0 {
		return out, nil
	}
	// A generous slack: moving an agent costs a reconnect, and a broker
	// half again as loaded as the best mapping is still far from full.
	cfg := placement.Config{Seed: 1, Slack: 0.5}
	var a placement.Assignment
	if len(v.stored.Clusters) > 0 {
		r, _, err := placement.Remap(placement.Assignment(v.stored.Clusters), m, cfg)
		if err != nil {
			return out, err
		}
		a = r
	} else {
		r, err := placement.Solve(m, cfg)
		if err != nil {
			return out, err
		}
		a = r.Assignment
	}
	for c, b := range a {
		out.Clusters[c] = b
	}
	return out, nil
}

func (s *Server) followAssignment(ctx context.Context) error {
	entries, rev, err := s.store.Snapshot(ctx)
	if err != nil {
		return err
	}
	v := &assignView{brokers: map[string]bool{}, clusters: map[string]bool{}, exports: map[string]map[string]bool{}}
	for _, e := range entries {
		v.apply(e)
	}
	// Deltas come in bursts (a big publish); settle briefly so one Remap
	// covers a burst of joins.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	check := func() error {
		if !v.stale() {
			return nil
		}
		a, err := v.compute()
		if err != nil {
			return err
		}
		_, err = s.store.Commit(ctx, Cond{Key: keyAssign, ModRev: v.storedRev}, []Entry{{Key: keyAssign, Value: mustJSON(a)}}, nil)
		if errors.Is(err, ErrConflict) {
			return nil // another broker wrote first; its entry arrives as a delta
		}
		if err == nil {
			s.log.Info("broker assignment updated", "brokers", a.Brokers, "clusters", len(a.Clusters))
		}
		return err
	}
	if err := check(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	events := make(chan []Entry, 64)
	go func() {
		errc <- s.store.Watch(wctx, rev, func(_ uint64, evs []Entry) error {
			select {
			case events <- evs:
				return nil
			case <-wctx.Done():
				return wctx.Err()
			}
		})
	}()
	defer func() { cancel(); <-errc }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			errc <- err // for the deferred receive
			return err
		case evs := <-events:
			for _, e := range evs {
				v.apply(e)
			}
			if v.stale() {
				timer.Reset(50 * time.Millisecond)
			}
		case <-timer.C:
			if err := check(); err != nil {
				return err
			}
		}
	}
}

// Fallback picks, among live brokers except the excluded ones, the one
// rendezvous hashing ranks highest for cluster: every agent of a cluster
// picks the same, and removing a broker moves only its own clusters.
func Fallback(cluster string, live []string, exclude map[string]bool) string {
	best, bestH := "", uint64(0)
	for _, b := range live {
		if exclude[b] {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(cluster))
		h.Write([]byte{0})
		h.Write([]byte(b))
		if x := h.Sum64(); best == "" || x > bestH {
			best, bestH = b, x
		}
	}
	return best
}
