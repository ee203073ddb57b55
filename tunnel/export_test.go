package tunnel

// PoolInbound counts the accepted sessions a pool still holds (Attach).
func PoolInbound(p *Pool) int {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	n := 0
	for _, r := range p.gws {
		n += len(r.inbound)
	}
	return n
}

// DirectWrites counts the frames s's reader wrote to a WriteTo's
// connection itself (directSink).
func DirectWrites(s Session) uint64 { return s.(*session).st.directWrites.Load() }

// PoolLoads is the streams each of p's slots carries now, in slot order;
// -1 for a slot without a live session.
func PoolLoads(p *Pool) []int {
	var out []int
	for _, sl := range p.slots {
		s, _ := sl.get()
		if s == nil {
			out = append(out, -1)
			continue
		}
		out = append(out, s.(streamCounter).openStreams())
	}
	return out
}
