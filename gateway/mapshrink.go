package gateway

import "maps"

// Maps that follow the imports are rebuilt once they have shrunk well
// below their peak. A Go map keeps the table it grew to when its entries
// are deleted: after 20 000 imports were applied and deleted, the
// steering routes' map and the reconcile's own held their 20 000-entry
// tables, the largest live objects the heap profile named (README,
// "A UDP flood at one import, 20 000 imports deleted"), and the pages
// under them stayed resident.

// mapPeak is the largest size a map was seen at since it was last built.
type mapPeak struct{ peak int }

// Rebuild a map only past these: under shrinkMinPeak entries its table is
// too small to matter, and a map rebuilt at a quarter of its peak costs a
// copy of at most a third of the entries deleted since.
const (
	shrinkMinPeak = 1024
	shrinkFactor  = 4
)

// shrink returns m, or a copy of it in a table of its present size when
// it has shrunk to a shrinkFactor'th of its peak. Callers must hold what
// guards m, and store the result where m was.
func shrink[M ~map[K]V, K comparable, V any](m M, p *mapPeak) M {
	n := len(m)
	if n >= p.peak {
		p.peak = n
		return m
	}
	if p.peak < shrinkMinPeak || n*shrinkFactor > p.peak {
		return m
	}
	fresh := make(M, n)
	maps.Copy(fresh, m)
	p.peak = n
	return fresh
}

// importMaps are the peaks of the maps that grow with the imports.
type importMaps struct {
	listeners, dests                     mapPeak
	recImports, recClaims, names, failed mapPeak
	udpListeners, udpClaims, udpImports  mapPeak
}

// shrinkImportMaps rebuilds the maps of imports that have shrunk; a
// reconcile calls it before it returns, g.mu held.
func (g *Gateway) shrinkImportMaps() {
	p, rec, u := &g.importMaps, &g.rec, &g.udp
	g.listeners = shrink(g.listeners, &p.listeners)
	rec.imports = shrink(rec.imports, &p.recImports)
	rec.claims = shrink(rec.claims, &p.recClaims)
	rec.names = shrink(rec.names, &p.names)
	rec.failed = shrink(rec.failed, &p.failed)
	u.listeners = shrink(u.listeners, &p.udpListeners)
	u.claims = shrink(u.claims, &p.udpClaims)
	u.imports = shrink(u.imports, &p.udpImports)
	if st := g.steering; st != nil {
		st.mu.Lock()
		st.dests = shrink(st.dests, &p.dests)
		st.mu.Unlock()
	}
}
