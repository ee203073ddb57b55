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
