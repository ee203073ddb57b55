package tunnel

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Suspicion states of a remote gateway after a failed open.
const (
	trusted   = iota
	suspected // an open failed: dead until a frame arrives after this point
	baselined // the frame counters were noted; any increase clears it
)

// GatewayHealth is what the pool knows of one gateway of the peer.
type GatewayHealth struct {
	Addr string
	// Live reports whether the table sends flows to it.
	Live bool
	// Heard reports whether a frame came from it within the silence
	// window at the last check (a pool without probes, such as QUIC's,
	// has no silence window: there Heard is having a session). Live keeps
	// a silent gateway while every one is silent; Heard does not, so that a gateway can tell that it
	// is cut off from the peer (docs/failover.md, "A gateway cut off from
	// its peers").
	Heard bool
	// Buckets is its share of the table now (of Size): its own buckets
	// while live plus those it inherited from dead gateways.
	Buckets, Size int
	// Streams counts streams opened on it since the pool started.
	Streams uint64
	// Downs counts its live → dead transitions.
	Downs uint64
	// Since is when it last changed state (or the pool started).
	Since time.Time
}

// Gateways reports every configured gateway of the peer, in the table's
// order (sorted by address).
func (p *Pool) Gateways() []GatewayHealth {
	v := p.view.Load()
	out := make([]GatewayHealth, len(p.gws))
	for i, r := range p.gws {
		out[i] = GatewayHealth{Addr: r.addr, Live: r.up.Load(), Heard: r.heard.Load(), Buckets: v.Buckets(r.addr), Size: v.Size(),
			Streams: r.streams.Load(), Downs: r.downs.Load(), Since: time.Unix(0, r.since.Load())}
	}
	return out
}

// kickHealth asks the health loop for a check now, without waiting.
func (p *Pool) kickHealth() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// watchHealth checks the gateways every probe interval and whenever a
// session comes up or ends, until ctx is done.
func (p *Pool) watchHealth(ctx context.Context) {
	var t *time.Ticker
	var tick <-chan time.Time
	if iv := p.probeInterval(); iv > 0 {
		t = time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			p.checkHealth(now)
			p.probe(now)
		case <-p.kick:
			p.checkHealth(time.Now())
		case <-p.retick:
			// SetProbeInterval never turns probing on or off.
			if t != nil {
				t.Reset(p.probeInterval())
			}
		}
	}
}

// probeInterval is the probe interval in force (PoolConfig.ProbeInterval
// unless SetProbeInterval changed it).
func (p *Pool) probeInterval() time.Duration { return time.Duration(p.interval.Load()) }

// ProbeInterval is the probe interval in force.
func (p *Pool) ProbeInterval() time.Duration { return p.probeInterval() }

// SetProbeInterval makes the pool probe every d instead of
// PoolConfig.ProbeInterval (d = 0: back to it), and its sessions' and
// attached sessions' keepalives run at d too (held below a quarter of
// their keepalive timeout, never shorter than their configured interval).
// A gateway whose liveness something else judges — the packet mode's
// prober, which probes the peer's programs — needs the pool's silence
// check only as a backstop, and at 10 ms every idle session and the pool
// wake a hundred times a second for it (docs/packet.md, "What the gateway
// processes cost"). The silence window is d × ProbeMisses from then on.
// A pool without probes (ProbeInterval 0) stays without.
func (p *Pool) SetProbeInterval(d time.Duration) {
	if p.cfg.ProbeInterval == 0 || d < 0 {
		return
	}
	if d == 0 {
		d = p.cfg.ProbeInterval
	}
	old := time.Duration(p.interval.Swap(int64(d)))
	if old == d {
		return
	}
	select {
	case p.retick <- struct{}{}:
	default:
	}
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	if d < old {
		// Under the longer interval a live gateway's last frame may be
		// older than the new window, and the faster pings' pongs take a
		// round trip to arrive: judging by the new window at once would
		// take live gateways out. The old window holds for one more of
		// its own length.
		p.shrunk, p.shrunkUntil = max(p.shrunk, old*time.Duration(p.cfg.ProbeMisses)), time.Time{}
	}
	for _, sl := range p.slots {
		if s, _ := sl.get(); s != nil {
			p.setKeepalive(s)
		}
	}
	for _, r := range p.gws {
		for _, in := range r.inbound {
			p.setKeepalive(in.s)
		}
	}
}

// keepaliver is a Session whose keepalive interval a Pool can change: the
// multiplexer's. QUIC sessions keep their own.
type keepaliver interface {
	setKeepaliveInterval(time.Duration)
}

// setKeepalive gives s the pool's interval when SetProbeInterval changed
// it, else its own configured one.
func (p *Pool) setKeepalive(s Session) {
	k, ok := s.(keepaliver)
	if !ok {
		return
	}
	d := p.probeInterval()
	if d == p.cfg.ProbeInterval {
		d = 0
	}
	k.setKeepaliveInterval(d)
}

// checkHealth decides every gateway's state from its sessions and installs
// a new table view when one changed. The pings of probe are the active
// probes: their pongs (or any other frame) advance FramesReceived, so
// reading a counter per session is all a check costs here.
func (p *Pool) checkHealth(now time.Time) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	p.checkHealthLocked(now)
}

// openFailed suspects gateway i after opening a stream on it failed and
// rechecks at once. Suspecting under healthMu keeps a check that is under
// way from taking frames it counted before the failure as a sign of life.
func (p *Pool) openFailed(i int) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	p.gws[i].suspect = suspected
	p.checkHealthLocked(time.Now())
}

// checkHealthLocked is checkHealth with healthMu held.
func (p *Pool) checkHealthLocked(now time.Time) {
	iv := p.probeInterval()
	window := iv * time.Duration(p.cfg.ProbeMisses)
	if p.shrunk > 0 {
		if p.shrunkUntil.IsZero() {
			p.shrunkUntil = now.Add(p.shrunk)
		}
		if now.Before(p.shrunkUntil) {
			window = max(window, p.shrunk)
		} else {
			p.shrunk = 0
		}
	}
	// A check that runs late means this process was not running: frames
	// may wait unread in the sockets, so silence proves nothing now. It
	// proves nothing either way: a late check keeps a live gateway live
	// but does not revive a dead one, which needs a frame read (a stalled
	// check that revived a gateway whose link was down sent new flows
	// into the dead link).
	late := iv > 0 && !p.lastCheck.IsZero() && now.Sub(p.lastCheck) > 2*iv
	if now.After(p.lastCheck) {
		p.lastCheck = now
	}
	alive := make([]bool, len(p.gws))
	hasSession := make([]bool, len(p.gws))
	heard := make([]bool, len(p.gws))
	newSession := make([]bool, len(p.gws))
	for _, sl := range p.slots {
		s, _ := sl.get()
		if s == nil {
			sl.seen = nil
			continue
		}
		gi := p.index(sl.gw)
		frames := s.Stats().FramesReceived
		switch {
		case sl.seen != s:
			sl.seen, sl.frames, sl.lastRecv = s, frames, now
			newSession[gi] = true
			p.setKeepalive(s) // the interval SetProbeInterval set, if any
		case frames != sl.frames:
			sl.frames, sl.lastRecv = frames, now
			heard[gi] = true
		}
		if sl.gw.suspect == suspected {
			// Forget what was heard before the failed open.
			heard[gi] = false
		}
		hasSession[gi] = true
		if iv == 0 || (late && sl.gw.up.Load()) || now.Sub(sl.lastRecv) < window {
			alive[gi] = true
		}
	}
	// Frames on sessions the gateway dialed to us prove it alive as well
	// (Attach); a gateway still needs a session of ours to be routed to.
	// inboundAlive also forgets ended sessions, so it runs for every
	// gateway.
	for i, r := range p.gws {
		if p.inboundAlive(r, now, window, late) && hasSession[i] {
			alive[i] = true
		}
	}
	flipped := false
	for i, r := range p.gws {
		if r.heard.Swap(alive[i]) != alive[i] {
			flipped = true
		}
	}
	if flipped && p.cfg.OnHeard != nil {
		p.cfg.OnHeard()
	}
	// Silence from every gateway at once is more likely this side's own
	// stall (or the path they share) than all of them dying together; with
	// none left the table would route nowhere, so keep those that were
	// live, or, when none was, every one with a session. A gateway already
	// found dead stays dead while another is kept.
	if !slices.Contains(alive, true) {
		for i, r := range p.gws {
			alive[i] = hasSession[i] && r.up.Load()
		}
		if !slices.Contains(alive, true) {
			copy(alive, hasSession)
		}
	}
	changed := false
	for i, r := range p.gws {
		switch r.suspect {
		case suspected:
			r.suspect = baselined
		case baselined:
			if heard[i] || newSession[i] {
				r.suspect = trusted
			}
		}
		up := alive[i] && r.suspect == trusted
		if r.up.Load() == up {
			continue
		}
		changed = true
		r.up.Store(up)
		r.since.Store(now.UnixNano())
		if !up {
			r.downs.Add(1)
		}
		why := "answering"
		switch {
		case !hasSession[i]:
			why = "no session"
		case !alive[i]:
			why = "silent"
		case !up:
			why = "open failed"
		}
		p.log.Info("peer gateway health", "peer", p.cfg.Peer, "addr", r.addr, "live", up, "why", why)
	}
	if changed {
		p.setView()
	}
	if slices.ContainsFunc(p.gws, func(r *remote) bool { return r.up.Load() }) {
		p.liveOnce.Do(func() { close(p.firstLive) })
	}
}

// prober is a Session whose keepalive probes a Pool can take over: the
// multiplexer's (session.go, pingRule). QUIC sessions keep their own.
type prober interface {
	takeProbes()
	probe()
	unasked() uint64
}

// probe pings one session of a gateway, taking its sessions in turn, once
// that gateway has been quiet for quietFor: nothing unasked (data, window
// updates, the peer's pings) heard from it, and no probe sent to it. A
// gateway that is not heard now, or is suspected after a failed open, is
// pinged every interval, so that its return is seen at once. The
// pong is the sign of life checkHealth reads; a gateway needs one per
// silence window, not one per session, and a busy one needs none.
// Probing only in silence keeps control packets off a WAN that carries
// requests: where jitter keeps packets in order, a packet sent just before
// a request holds it back by up to the jitter (docs/failover.md, "What the
// probes cost"). Taking turns means a session that died without a word
// leaves its gateway the pongs of the others.
func (p *Pool) probe(now time.Time) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	heard := make([]bool, len(p.gws))
	cands := make([][]prober, len(p.gws))
	rtt := make([]time.Duration, len(p.gws))
	for _, sl := range p.slots {
		s, _ := sl.get()
		pb, ok := s.(prober)
		if !ok {
			sl.probed = nil
			continue
		}
		gi := p.index(sl.gw)
		u := pb.unasked()
		if sl.probed != s {
			// A new session pinged as it started.
			pb.takeProbes()
			sl.probed = s
			heard[gi] = true
		} else if u != sl.unasked {
			heard[gi] = true
		}
		sl.unasked = u
		cands[gi] = append(cands[gi], pb)
		rtt[gi] = max(rtt[gi], s.RTT())
	}
	for i, r := range p.gws {
		// Traffic on the sessions it dialed to us stands in for a pong,
		// except for a gateway suspected after a failed open, which must
		// answer on our own sessions.
		if r.suspect == trusted && inboundHeard(r) {
			heard[i] = true
		}
		if heard[i] {
			r.lastHeard = now
		}
		if heard[i] || len(cands[i]) == 0 {
			continue
		}
		if q := p.quietFor(rtt[i]); r.suspect == trusted && r.heard.Load() && (now.Sub(r.lastHeard) < q || now.Sub(r.lastProbe) < q) {
			continue
		}
		cands[i][r.nextProbe%len(cands[i])].probe()
		r.nextProbe++
		r.lastProbe = now
	}
}

// quietFor is how long a gateway may be quiet before probe pings it: as
// long as the silence window leaves room for the ping's round trip (rtt,
// the largest of its sessions' smoothed round trips) and for three probe
// intervals of rounding and scheduling, and at least one interval. A live
// gateway's pong then always lands inside the window; a dead gateway is
// still found one window after its last frame.
func (p *Pool) quietFor(rtt time.Duration) time.Duration {
	iv := p.probeInterval()
	return max(iv, iv*time.Duration(p.cfg.ProbeMisses)-rtt-3*iv)
}

func (p *Pool) index(r *remote) int {
	for i, x := range p.gws {
		if x == r {
			return i
		}
	}
	panic("tunnel: slot of an unknown gateway")
}

// setView installs the table view with every dead gateway taken out.
func (p *Pool) setView() {
	down := map[string]bool{}
	for _, r := range p.gws {
		if !r.up.Load() {
			down[r.addr] = true
		}
	}
	p.view.Store(p.base.WithDown(down))
}

// Attach counts the frames of s, a session that one of the peer's
// gateways dialed to this one (accepted by a Listener, authenticated as
// the peer), as signs of life of that gateway: while it carries requests
// toward us, the pool sends no probes on its own idle sessions to the
// gateway, and the silence check counts its frames (docs/failover.md,
// "What the probes cost"). The session's certificate names the cluster,
// not the gateway, so the gateway is the member whose address has the
// session's remote IP: when no member or more than one has it, or a member
// is given by name (it might resolve to that IP), the mapping is ambiguous
// and Attach leaves s out and reports false (as for a session that does
// not tell its remote address). The pool forgets s when it ends.
func (p *Pool) Attach(s Session) bool {
	ra, ok := s.(interface{ RemoteAddr() net.Addr })
	if !ok {
		return false
	}
	r := p.memberOf(ra.RemoteAddr())
	if r == nil {
		return false
	}
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	in := &inbound{s: s, frames: s.Stats().FramesReceived}
	if pb, ok := s.(prober); ok {
		in.unasked = pb.unasked()
	}
	r.inbound = append(r.inbound, in)
	p.setKeepalive(s)
	return true
}

// memberOf returns the one gateway whose address has addr's IP, or nil.
func (p *Pool) memberOf(addr net.Addr) *remote {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return nil
	}
	ip := ap.Addr().Unmap()
	var found *remote
	for _, r := range p.gws {
		host, _, err := net.SplitHostPort(r.addr)
		if err != nil {
			return nil
		}
		rip, err := netip.ParseAddr(host)
		if err != nil {
			return nil // a name: it might be this IP too
		}
		if rip.Unmap() == ip {
			if found != nil {
				return nil
			}
			found = r
		}
	}
	return found
}

// inboundAlive reports whether one of r's inbound sessions received a
// frame within window, dropping the ended ones (healthMu held).
func (p *Pool) inboundAlive(r *remote, now time.Time, window time.Duration, late bool) bool {
	alive := false
	r.inbound = slices.DeleteFunc(r.inbound, func(in *inbound) bool {
		if in.s.Err() != nil {
			return true
		}
		if f := in.s.Stats().FramesReceived; f != in.frames {
			in.frames, in.lastRecv = f, now
		}
		if !in.lastRecv.IsZero() && (window == 0 || (late && r.up.Load()) || now.Sub(in.lastRecv) < window) {
			alive = true
		}
		return false
	})
	return alive
}

// inboundHeard reports whether one of r's inbound sessions received a
// frame it did not ask for since the last probe round (healthMu held).
func inboundHeard(r *remote) bool {
	heard := false
	for _, in := range r.inbound {
		pb, ok := in.s.(prober)
		if !ok || in.s.Err() != nil {
			continue
		}
		if u := pb.unasked(); u != in.unasked {
			in.unasked = u
			heard = true
		}
	}
	return heard
}
