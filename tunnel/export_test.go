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
