package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"reflect"
	"sort"
	"time"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/catalog"
)

// importer turns the agent's view of remote clusters into Peer and
// ServiceImport resources on the gateway.
type importer struct {
	a       *Agent
	alloc   *allocator
	peers   map[string]*catalog.Peer          // applied, by cluster
	imports map[string]*catalog.ServiceImport // applied, by ns/name
	loaded  bool
}

func newImporter(a *Agent) (*importer, error) {
	pfx, err := netip.ParsePrefix(a.cfg.ImportPrefix)
	if err != nil {
		return nil, fmt.Errorf("import-prefix: %w", err)
	}
	return &importer{a: a, alloc: newAllocator(pfx.Masked())}, nil
}

// run reconciles after every catalog change (coalesced) and retries while
// the gateway is unreachable.
func (im *importer) run(ctx context.Context) error {
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	pending := true
	for {
		if pending {
			if err := im.reconcile(); err != nil {
				im.a.log.Warn("applying imports", "err", err)
			} else {
				pending = false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-im.a.dirty:
			pending = true
		case <-retry.C:
		}
	}
}

// load reads back what an earlier run applied, so addresses stay stable.
func (im *importer) load() error {
	im.peers, im.imports = map[string]*catalog.Peer{}, map[string]*catalog.ServiceImport{}
	for _, kind := range []catalog.Kind{catalog.KindPeer, catalog.KindServiceImport} {
		rs, err := im.a.admin.List(string(kind))
		if err != nil {
			return fmt.Errorf("gateway resources: %w", err)
		}
		for _, r := range rs {
			if r.Meta().Labels[ManagedByLabel] != ManagedByValue {
				continue
			}
			switch r := r.(type) {
			case *catalog.Peer:
				im.peers[r.Metadata.Name] = r
			case *catalog.ServiceImport:
				k := r.Metadata.Namespace + "/" + r.Metadata.Name
				im.imports[k] = r
				if len(r.Spec.IPs) > 0 {
					if ip, err := netip.ParseAddr(r.Spec.IPs[0]); err == nil {
						im.alloc.reserve(k, ip)
					}
				}
			}
		}
	}
	im.loaded = true
	return nil
}

// reconcile applies what changed in the view since the last successful
// reconcile: every import after a snapshot or a gateway change, else only
// the imports of the export keys that changed, so a delta costs in
// proportion to itself and not to the catalog.
func (im *importer) reconcile() (err error) {
	a := im.a
	a.mu.Lock()
	all, keys := a.changedAll || !im.loaded, a.changedKeys
	a.changedAll, a.changedKeys = false, nil
	a.mu.Unlock()
	defer func() {
		if err != nil { // redo everything next time: what changed is lost
			a.mu.Lock()
			a.changedAll = true
			a.mu.Unlock()
		}
	}()
	if !im.loaded {
		if err := im.load(); err != nil {
			return err
		}
	}
	// Desired state from the view, under the lock; the admin calls after.
	a.mu.Lock()
	wantPeers := map[string]*catalog.Peer{}
	type src struct {
		cluster string
		ex      broker.Export
	}
	byKey := map[string][]src{}
	for id, rc := range a.remote {
		var addrs []string
		for _, g := range rc.gateways {
			if g.Healthy {
				addrs = append(addrs, g.Addr)
			}
		}
		if len(addrs) == 0 {
			for _, g := range rc.gateways {
				addrs = append(addrs, g.Addr)
			}
		}
		if len(addrs) > 0 {
			wantPeers[id] = &catalog.Peer{Metadata: catalog.ObjectMeta{Name: id, Labels: managed()}, Spec: catalog.PeerSpec{Gateways: addrs}}
		}
		if all {
			for k, e := range rc.exports {
				byKey[k] = append(byKey[k], src{id, e})
			}
			continue
		}
		for k := range keys {
			if e, ok := rc.exports[k]; ok {
				byKey[k] = append(byKey[k], src{id, e})
			}
		}
	}
	a.mu.Unlock()

	wantImports := map[string]*catalog.ServiceImport{}
	for k, srcs := range byKey {
		sort.Slice(srcs, func(i, j int) bool { return srcs[i].cluster < srcs[j].cluster })
		var ports []catalog.ServicePort
		var clusters []catalog.ClusterStatus
		for _, s := range srcs {
			if wantPeers[s.cluster] == nil {
				continue // no gateway to reach it through
			}
			clusters = append(clusters, catalog.ClusterStatus{Cluster: s.cluster})
			if ports == nil && len(s.ex.Ports) > 0 {
				ports = s.ex.Ports
			}
		}
		if len(clusters) == 0 || len(ports) == 0 {
			continue // a ClusterSetIP import needs a port to listen on
		}
		ip, err := im.alloc.get(k)
		if err != nil {
			a.log.Warn("import not applied", "import", k, "err", err)
			continue
		}
		wantImports[k] = &catalog.ServiceImport{
			Metadata: catalog.ObjectMeta{Name: srcs[0].ex.Name, Namespace: srcs[0].ex.Namespace, Labels: managed()},
			Spec:     catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{ip.String()}, Ports: ports, Clusters: clusters},
		}
	}

	var apply, del []catalog.Resource
	for id, p := range wantPeers {
		if old := im.peers[id]; old == nil || !reflect.DeepEqual(old.Spec, p.Spec) {
			apply = append(apply, p)
		}
	}
	for k, imp := range wantImports {
		if old := im.imports[k]; old == nil || !sameImport(old, imp) {
			apply = append(apply, imp)
		}
	}
	if all {
		for k, old := range im.imports {
			if wantImports[k] == nil {
				del = append(del, old)
			}
		}
	} else {
		for k := range keys {
			if old := im.imports[k]; old != nil && wantImports[k] == nil {
				del = append(del, old)
			}
		}
	}
	for id, old := range im.peers {
		if wantPeers[id] == nil {
			del = append(del, old)
		}
	}
	if len(apply) > 0 {
		// In chunks that stay well below the admin API's body limit.
		for off := 0; off < len(apply); off += applyChunk {
			chunk := apply[off:min(off+applyChunk, len(apply))]
			res, err := a.admin.ApplyResources(chunk)
			if err != nil {
				return fmt.Errorf("apply %d resources: %w", len(chunk), err)
			}
			if res.Warning != "" {
				a.log.Warn("gateway stored imports but could not realize all", "warning", res.Warning)
			}
			a.traceImports(chunk)
		}
		for _, r := range apply {
			switch r := r.(type) {
			case *catalog.Peer:
				im.peers[r.Metadata.Name] = r
			case *catalog.ServiceImport:
				im.imports[r.Metadata.Namespace+"/"+r.Metadata.Name] = r
			}
		}
	}
	if len(del) > 0 {
		if _, err := a.admin.DeleteResources(del); err != nil {
			return fmt.Errorf("delete %d resources: %w", len(del), err)
		}
		for _, r := range del {
			switch r := r.(type) {
			case *catalog.Peer:
				delete(im.peers, r.Metadata.Name)
			case *catalog.ServiceImport:
				k := r.Metadata.Namespace + "/" + r.Metadata.Name
				delete(im.imports, k)
				im.alloc.release(k)
			}
		}
	}
	return nil
}

// applyChunk is how many resources one admin call applies.
const applyChunk = 4000

// traceImports records when imports were applied to the gateway (the
// apply call returned: stored, and listening where the gateway could).
func (a *Agent) traceImports(rs []catalog.Resource) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace == nil {
		return
	}
	now := time.Now().UnixNano()
	for _, r := range rs {
		if imp, ok := r.(*catalog.ServiceImport); ok {
			fmt.Fprintf(a.trace, "%d imp %s/%s\n", now, imp.Metadata.Namespace, imp.Metadata.Name)
		}
	}
	a.trace.Flush()
}

func managed() map[string]string { return map[string]string{ManagedByLabel: ManagedByValue} }

func sameImport(a, b *catalog.ServiceImport) bool {
	return reflect.DeepEqual(a.Spec.IPs, b.Spec.IPs) && reflect.DeepEqual(normPorts(a.Spec.Ports), normPorts(b.Spec.Ports)) &&
		reflect.DeepEqual(a.SourceClusters(), b.SourceClusters())
}

func normPorts(ps []catalog.ServicePort) []catalog.ServicePort {
	out := make([]catalog.ServicePort, len(ps))
	for i, p := range ps {
		if p.Protocol == "" {
			p.Protocol = catalog.TCP
		}
		out[i] = p
	}
	return out
}

// allocator hands out import addresses from a prefix: the first free one
// probing linearly from a hash of the import's key, so an import usually
// gets the same address on every cluster and after a restart, and keeps
// it while it lives.
type allocator struct {
	pfx   netip.Prefix
	size  uint32 // usable host addresses: network and broadcast excluded
	used  map[netip.Addr]string
	byKey map[string]netip.Addr
}

func newAllocator(pfx netip.Prefix) *allocator {
	return &allocator{pfx: pfx, size: uint32(1)<<(32-pfx.Bits()) - 2, used: map[netip.Addr]string{}, byKey: map[string]netip.Addr{}}
}

func (al *allocator) nth(i uint32) netip.Addr {
	base := al.pfx.Addr().As4()
	v := binary.BigEndian.Uint32(base[:]) + 1 + i
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func (al *allocator) reserve(key string, ip netip.Addr) {
	if !al.pfx.Contains(ip) || al.used[ip] != "" {
		return
	}
	al.used[ip], al.byKey[key] = key, ip
}

func (al *allocator) get(key string) (netip.Addr, error) {
	if ip, ok := al.byKey[key]; ok {
		return ip, nil
	}
	if uint32(len(al.used)) >= al.size {
		return netip.Addr{}, fmt.Errorf("import-prefix %s is full (%d addresses)", al.pfx, al.size)
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	start := h.Sum32() % al.size
	for i := uint32(0); i < al.size; i++ {
		ip := al.nth((start + i) % al.size)
		if al.used[ip] == "" {
			al.used[ip], al.byKey[key] = key, ip
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("import-prefix %s is full", al.pfx)
}

func (al *allocator) release(key string) {
	if ip, ok := al.byKey[key]; ok {
		delete(al.used, ip)
		delete(al.byKey, key)
	}
}
