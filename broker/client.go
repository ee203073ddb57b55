package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Brokers are host:port addresses of brokers to start from; the client
	// learns the live set and its RBCM assignment from the brokers and
	// moves between them (see assign.go).
	Brokers []string
	// TLS is the fabric client configuration for brokers,
	// fabric.Identity.BrokerClientTLS(): brokers present broker identities
	// (spiffe://<clusterset>/broker/<name>). The client also refuses, after
	// any handshake, a server whose certificate is not a broker's.
	TLS *tls.Config
	// Cluster is the local cluster ID; it must be the ID in the
	// certificate TLS presents, or the broker refuses the connection.
	Cluster string
	// OnUpdate receives the catalog: one snapshot first, then deltas, in
	// revision order, from one goroutine. It must not block for long: the
	// client reads no further frames while it runs. Nil means the caller
	// only publishes (and reads Catalog).
	OnUpdate func(Update)
	// OnConnect, if set, is called (from Run's goroutine) each time a
	// session with a broker starts, with the broker's ID.
	OnConnect func(broker string)
	// DialTimeout bounds one connection attempt including the TLS
	// handshake (default 500ms), so a dead broker costs little of the
	// failover budget.
	DialTimeout time.Duration
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// Validate names the first missing or bad field.
func (c ClientConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("brokers: need at least one broker address")
	}
	if c.TLS == nil {
		return errors.New("tls: required (the fabric identity's ClientTLS)")
	}
	if c.Cluster == "" {
		return errors.New("cluster: required")
	}
	if c.DialTimeout < 0 {
		return errors.New("dialTimeout: must be >= 0")
	}
	return nil
}

// Client is one cluster's connection to the broker layer. Create it with
// NewClient, start Run, then Publish whenever the cluster's state changes.
type Client struct {
	cfg ClientConfig
	log *slog.Logger

	mu      sync.Mutex
	m       mirror
	synced  bool          // m holds a snapshot (and every delta since)
	changed chan struct{} // closed and replaced when m or sess changes
	sess    *session
	suspect map[string]time.Time // broker ID → when its connection failed
	closed  bool
	cancel  context.CancelFunc

	pubMu sync.Mutex // one Publish at a time
	seq   atomic.Uint64

	bytesIn, bytesOut atomic.Uint64
	connects          atomic.Uint64
}

// mirror is the client's copy of the catalog.
type mirror struct {
	rev      uint64
	clusters map[string]*clusterMirror
	brokers  map[string]string // broker ID → address
	assign   assignment
}

type clusterMirror struct {
	metaRev  uint64
	gateways []Gateway
	exports  map[string]Export
}

// NewClient checks cfg; it opens no connection (Run does).
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("broker client: %w", err)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 500 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, log: log.With("cluster", cfg.Cluster), changed: make(chan struct{}),
		suspect: map[string]time.Time{}, m: newMirror()}, nil
}

func newMirror() mirror {
	return mirror{clusters: map[string]*clusterMirror{}, brokers: map[string]string{}}
}

// notifyLocked wakes everyone waiting for a change; c.mu must be held.
func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Run keeps a connection to the assigned broker (failing over to another
// when it dies, resuming from the last revision seen) until ctx is done or
// Close is called; it returns after its goroutines exit.
func (c *Client) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.cancel = cancel
	c.mu.Unlock()
	backoff := 50 * time.Millisecond
	bootstrap := 0
	for ctx.Err() == nil {
		id, addr := c.pick(&bootstrap)
		s, err := c.dial(ctx, addr)
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				// Reachable but refusing us (another protocol version, a
				// foreign revision): say so, it will not fix itself.
				c.log.Warn("broker refused the session", "broker", id, "addr", addr, "err", err)
			} else {
				c.log.Debug("broker unreachable", "broker", id, "addr", addr, "err", err)
			}
			c.markSuspect(id)
			if id == "" || c.allSuspect() {
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		err = c.serve(ctx, s)
		if ctx.Err() == nil {
			var pe *ProtocolError
			switch {
			case errors.Is(err, errMove):
				c.log.Info("moving to the assigned broker", "from", s.broker)
			case errors.As(err, &pe):
				// The broker is fine; our request was refused (a stale
				// base after a failover race): reconnect and replan.
				c.log.Info("broker refused a request", "broker", s.broker, "err", err)
			default:
				c.log.Info("broker connection lost", "broker", s.broker, "err", err)
				c.markSuspect(s.broker)
			}
		}
	}
	return nil
}

// pick chooses the broker to dial: the assigned one if live and not
// suspect, else the rendezvous fallback among the live ones, else the next
// bootstrap address.
func (c *Client) pick(bootstrap *int) (id, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b, t := range c.suspect {
		if time.Since(t) > 3*time.Second {
			delete(c.suspect, b)
		}
	}
	ex := map[string]bool{}
	for b := range c.suspect {
		ex[b] = true
	}
	if b := c.m.assign.Clusters[c.cfg.Cluster]; b != "" && !ex[b] && c.m.brokers[b] != "" {
		return b, c.m.brokers[b]
	}
	if b := Fallback(c.cfg.Cluster, sortedKeys(c.m.brokers), ex); b != "" {
		return b, c.m.brokers[b]
	}
	addr = c.cfg.Brokers[*bootstrap%len(c.cfg.Brokers)]
	*bootstrap++
	return "", addr
}

func (c *Client) markSuspect(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	c.suspect[id] = time.Now()
	c.mu.Unlock()
}

func (c *Client) allSuspect() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range c.m.brokers {
		if _, ok := c.suspect[b]; !ok {
			return false
		}
	}
	return true
}

// session is one connection to a broker.
type session struct {
	broker string
	// ownRev is the revision of this cluster's entries when the session
	// started: publishing waits until the stream delivered it, so the base
	// it sends includes publishes cut off on an earlier session.
	ownRev uint64
	conn   net.Conn
	br     *bufio.Reader
	w      *frameWriter
	acks   chan *message // acks and the final error, for Publish
	done   chan struct{} // closed when serve returns
	err    error         // why it ended, set before done closes
}

// countingConn counts the bytes a connection carries on the wire (TLS
// records included).
type countingConn struct {
	net.Conn
	in, out *atomic.Uint64
}

func (cc countingConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	cc.in.Add(uint64(n))
	return n, err
}

func (cc countingConn) Write(b []byte) (int, error) {
	n, err := cc.Conn.Write(b)
	cc.out.Add(uint64(n))
	return n, err
}

func (c *Client) dial(ctx context.Context, addr string) (*session, error) {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	tc := tls.Client(countingConn{raw, &c.bytesIn, &c.bytesOut}, c.cfg.TLS)
	if err := tc.HandshakeContext(dctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	// Only a broker identity may serve the catalog, whatever the TLS
	// configuration checked: a cluster's certificate is refused here.
	if cs := tc.ConnectionState(); len(cs.PeerCertificates) == 0 {
		raw.Close()
		return nil, fmt.Errorf("broker %s: %w: no certificate", addr, fabric.ErrNoIdentity)
	} else if _, err := fabric.BrokerName(cs.PeerCertificates[0]); err != nil {
		raw.Close()
		return nil, fmt.Errorf("broker %s: %w", addr, err)
	}
	s := &session{conn: tc, br: bufio.NewReaderSize(tc, 64<<10), acks: make(chan *message, 64), done: make(chan struct{})}
	s.w = &frameWriter{bw: bufio.NewWriterSize(tc, 64<<10), c: tc}
	c.mu.Lock()
	since := uint64(0)
	if c.synced {
		since = c.m.rev
	}
	c.mu.Unlock()
	deadline, _ := dctx.Deadline()
	tc.SetDeadline(deadline)
	if err := s.w.send(&message{T: msgHello, V: ProtocolVersion, Cluster: c.cfg.Cluster, Since: since}); err != nil {
		tc.Close()
		return nil, fmt.Errorf("hello to %s: %w", addr, err)
	}
	m, err := readFrame(s.br)
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("welcome from %s: %w", addr, err)
	}
	tc.SetDeadline(time.Time{})
	switch m.T {
	case msgWelcome:
	case msgError:
		tc.Close()
		if m.Code == CodeFuture {
			// The store is not the one our revision came from (or it was
			// reset): start over with a snapshot.
			c.mu.Lock()
			c.synced = false
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("broker %s refused: %w", addr, &ProtocolError{Code: m.Code, Msg: m.Msg})
	default:
		tc.Close()
		return nil, fmt.Errorf("broker %s: %s frame before welcome", addr, m.T)
	}
	s.broker, s.ownRev = m.Broker, m.Own
	c.connects.Add(1)
	return s, nil
}

var errMove = errors.New("assignment moved this cluster to another broker")

// serve reads the session's frames until it fails or the assignment moves
// the cluster elsewhere.
func (c *Client) serve(ctx context.Context, s *session) (err error) {
	c.mu.Lock()
	c.sess = s
	c.notifyLocked()
	c.mu.Unlock()
	if c.cfg.OnConnect != nil {
		c.cfg.OnConnect(s.broker)
	}
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	defer func() {
		stop()
		s.conn.Close()
		c.mu.Lock()
		c.sess = nil
		s.err = err
		close(s.done)
		c.notifyLocked()
		c.mu.Unlock()
	}()
	var snap []wireEntry
	var delta []wireEntry
	for {
		m, err := readFrame(s.br)
		if err != nil {
			return err
		}
		switch m.T {
		case msgAck:
			s.acks <- m
		case msgError:
			return fmt.Errorf("broker %s closed the connection: %w", s.broker, &ProtocolError{Code: m.Code, Msg: m.Msg})
		case msgSnapshot:
			snap = append(snap, m.Entries...)
			if m.More {
				continue
			}
			c.applySnapshot(m.Rev, snap)
			snap = nil
		case msgDelta:
			delta = append(delta, m.Entries...)
			if m.More {
				continue
			}
			c.applyDelta(m.Rev, delta)
			delta = nil
		default:
			return fmt.Errorf("broker %s: unexpected %s frame", s.broker, m.T)
		}
		if c.shouldMove(s.broker) {
			return errMove
		}
	}
}

// shouldMove reports whether the assignment puts this cluster on another
// live broker than the one it is connected to.
func (c *Client) shouldMove(current string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m.assign.Clusters[c.cfg.Cluster]
	if b == "" || b == current || c.m.brokers[b] == "" {
		return false
	}
	_, bad := c.suspect[b]
	return !bad
}

func (c *Client) applySnapshot(rev uint64, entries []wireEntry) {
	m := newMirror()
	m.rev = rev
	for _, e := range entries {
		m.apply(e)
	}
	c.mu.Lock()
	c.m, c.synced = m, true
	cat := c.catalogLocked()
	c.notifyLocked()
	c.mu.Unlock()
	if c.cfg.OnUpdate != nil {
		c.cfg.OnUpdate(Update{Revision: rev, Snapshot: true, Catalog: cat})
	}
}

func (c *Client) applyDelta(rev uint64, entries []wireEntry) {
	var changes []Change
	c.mu.Lock()
	for _, e := range entries {
		if ch, ok := c.m.apply(e); ok {
			changes = append(changes, ch)
		}
	}
	c.m.rev = max(c.m.rev, rev)
	c.notifyLocked()
	c.mu.Unlock()
	if c.cfg.OnUpdate != nil && len(changes) > 0 {
		c.cfg.OnUpdate(Update{Revision: rev, Changes: changes})
	}
}

// apply folds one entry into the mirror and returns the Change it is for
// a consumer, if any. Entries that do not decode are skipped: the broker
// validated them on the way in, so they come from a newer broker.
func (m *mirror) apply(e wireEntry) (Change, bool) {
	kind, id, nsName := parseKey(e.Key)
	del := len(e.Value) == 0 && e.Export == nil
	cl := func() *clusterMirror {
		x := m.clusters[id]
		if x == nil {
			x = &clusterMirror{exports: map[string]Export{}}
			m.clusters[id] = x
		}
		return x
	}
	switch kind {
	case kindBroker:
		var bi brokerInfo
		if del || json.Unmarshal(e.Value, &bi) != nil {
			delete(m.brokers, id)
		} else {
			m.brokers[id] = bi.Addr
		}
	case kindAssign:
		m.assign = assignment{}
		if !del {
			_ = json.Unmarshal(e.Value, &m.assign)
		}
	case kindMeta:
		if del {
			delete(m.clusters, id)
			return Change{}, false
		}
		cl().metaRev = e.ModRev
	case kindGateways:
		var gws []Gateway
		if !del && json.Unmarshal(e.Value, &gws) != nil {
			return Change{}, false
		}
		x := cl()
		x.gateways = gws
		return Change{Cluster: id, Gateways: gws, Deleted: del}, true
	case kindExport:
		x := cl()
		if del {
			ns, name, _ := cutKey(nsName)
			delete(x.exports, nsName)
			return Change{Cluster: id, Export: &Export{Namespace: ns, Name: name}, Deleted: true}, true
		}
		ex := e.Export
		if ex == nil { // from the store as JSON (v): no broker sends this
			ex = new(Export)
			if json.Unmarshal(e.Value, ex) != nil {
				return Change{}, false
			}
		}
		x.exports[nsName] = *ex
		return Change{Cluster: id, Export: ex}, true
	}
	return Change{}, false
}

// catalogLocked builds a Catalog from the mirror; c.mu must be held.
func (c *Client) catalogLocked() *Catalog {
	cat := &Catalog{Revision: c.m.rev, Clusters: make(map[string]*ClusterState, len(c.m.clusters))}
	for id, x := range c.m.clusters {
		cat.Clusters[id] = x.state()
	}
	return cat
}

func (x *clusterMirror) state() *ClusterState {
	st := &ClusterState{Gateways: append([]Gateway(nil), x.gateways...)}
	keys := sortedKeys(x.exports)
	st.Exports = make([]Export, len(keys))
	for i, k := range keys {
		st.Exports[i] = x.exports[k]
	}
	return st
}

// Catalog returns a copy of the current view of the clusterset and whether
// the client has received a snapshot yet.
func (c *Client) Catalog() (*Catalog, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.catalogLocked(), c.synced
}

// Broker returns the ID of the broker the client is connected to, or "".
func (c *Client) Broker() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return ""
	}
	return c.sess.broker
}

// Stats are a client's counters.
type Stats struct {
	BytesIn, BytesOut uint64 // on the wire, TLS included
	Connects          uint64 // sessions established
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(), Connects: c.connects.Load()}
}

// Publish replaces this cluster's published state with st and returns the
// catalog revision that holds it, once the client's own view has caught up
// with it. It is idempotent: publishing an equal state sends nothing. While
// no broker is reachable it waits (until ctx ends) and then publishes; a
// publish cut off by a failover is redone on the next broker.
func (c *Client) Publish(ctx context.Context, st ClusterState) (uint64, error) {
	want := make(map[string]Export, len(st.Exports))
	for i, e := range st.Exports {
		if e.Namespace == "" {
			e.Namespace = "default"
		}
		if _, dup := want[e.Key()]; dup {
			return 0, fmt.Errorf("publish: exports[%d]: %s twice", i, e.Key())
		}
		want[e.Key()] = e
	}
	// Only what differs from the broker's copy is validated: the rest the
	// broker accepted already. An agent republishes its whole state on
	// every change, so validating all of it each time cost more than
	// sending the change.
	if err := c.validateChanged(st.Exports); err != nil {
		return 0, err
	}
	if err := checkGateways(st.Gateways); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	for {
		s, frames, base, rev, err := c.plan(ctx, want, st.Gateways)
		if err != nil {
			return 0, err
		}
		if len(frames) == 0 {
			return rev, nil
		}
		last, err := c.send(ctx, s, frames, base)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			c.log.Debug("publish interrupted, retrying", "err", err)
			select { // wait for the session to end and another to start
			case <-s.done:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			continue
		}
		if err := c.waitRev(ctx, last); err != nil {
			return 0, err
		}
		return last, nil
	}
}

// plan waits for a synced session and computes the frames that turn the
// broker's copy of this cluster into want.
func (c *Client) plan(ctx context.Context, want map[string]Export, gws []Gateway) (*session, []*message, uint64, uint64, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, nil, 0, 0, errors.New("broker client closed")
		}
		if c.sess != nil && c.synced && c.ownRevLocked() >= c.sess.ownRev {
			s := c.sess
			own := c.m.clusters[c.cfg.Cluster]
			if own == nil {
				own = &clusterMirror{exports: map[string]Export{}}
			}
			var put []Export
			var del []string
			for k, e := range want {
				if old, ok := own.exports[k]; !ok || !sameExport(old, e) {
					put = append(put, e)
				}
			}
			for k := range own.exports {
				if _, ok := want[k]; !ok {
					del = append(del, k)
				}
			}
			gwChanged := !gatewaysEqual(own.gateways, gws) || own.metaRev == 0
			base, rev := own.metaRev, c.m.rev
			c.mu.Unlock()
			sort.Slice(put, func(i, j int) bool { return put[i].Key() < put[j].Key() })
			sort.Strings(del)
			var frames []*message
			for len(put) > 0 || len(del) > 0 || gwChanged {
				m := &message{T: msgPublish, Cluster: c.cfg.Cluster}
				if gwChanged {
					g := append([]Gateway{}, gws...)
					m.Gateways = &g
					gwChanged = false
				}
				size := 0
				for len(put) > 0 && len(m.Put) < MaxExportsPerFrame && size < publishChunk {
					size += exportWireSize(put[0])
					m.Put, put = append(m.Put, put[0]), put[1:]
				}
				for len(del) > 0 && len(m.Del) < MaxExportsPerFrame && size < publishChunk {
					size += len(del[0]) + 3
					m.Del, del = append(m.Del, del[0]), del[1:]
				}
				frames = append(frames, m)
			}
			return s, frames, base, rev, nil
		}
		wait := c.changed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, 0, 0, ctx.Err()
		case <-wait:
		}
	}
}

func (c *Client) ownRevLocked() uint64 {
	if own := c.m.clusters[c.cfg.Cluster]; own != nil {
		return own.metaRev
	}
	return 0
}

// validateChanged validates the exports that differ from the broker's
// copy of this cluster's (namespace defaulted as Publish does).
func (c *Client) validateChanged(exports []Export) error {
	type changed struct {
		i int
		e Export
	}
	var check []changed
	c.mu.Lock()
	var own map[string]Export
	if x := c.m.clusters[c.cfg.Cluster]; x != nil {
		own = x.exports
	}
	for i, e := range exports {
		if e.Namespace == "" {
			e.Namespace = "default"
		}
		if old, ok := own[e.Key()]; !ok || !sameExport(old, e) {
			check = append(check, changed{i, e})
		}
	}
	c.mu.Unlock()
	for _, x := range check {
		if err := x.e.Validate(); err != nil {
			return fmt.Errorf("publish: exports[%d]: %w", x.i, err)
		}
	}
	return nil
}

// sameExport is reflect.DeepEqual of the normalized exports (a missing
// protocol is TCP; empty and nil lists and maps are equal), without
// reflection or copies: it runs for every export on every publish.
func sameExport(a, b Export) bool {
	if a.Namespace != b.Namespace || a.Name != b.Name || len(a.Ports) != len(b.Ports) || len(a.Labels) != len(b.Labels) {
		return false
	}
	for i := range a.Ports {
		p, q := a.Ports[i], b.Ports[i]
		if p.Protocol == "" {
			p.Protocol = catalog.TCP
		}
		if q.Protocol == "" {
			q.Protocol = catalog.TCP
		}
		if p != q {
			return false
		}
	}
	for k, v := range a.Labels {
		if w, ok := b.Labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func gatewaysEqual(a, b []Gateway) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// send pipelines the frames: the first is based on base, the others on
// the one before (cont), and waits for every ack.
func (c *Client) send(ctx context.Context, s *session, frames []*message, base uint64) (uint64, error) {
	for i, m := range frames {
		m.Seq = c.seq.Add(1)
		if i == 0 {
			m.Base = base
		} else {
			m.Cont = true
		}
		if err := s.w.send(m); err != nil {
			s.conn.Close()
			return 0, err
		}
	}
	var rev uint64
	for _, m := range frames {
		select {
		case a := <-s.acks:
			if a.Seq != m.Seq {
				s.conn.Close()
				return 0, fmt.Errorf("ack for seq %d, want %d", a.Seq, m.Seq)
			}
			rev = a.Rev
		case <-s.done:
			return 0, s.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return rev, nil
}

// waitRev waits until the mirror reached rev.
func (c *Client) waitRev(ctx context.Context, rev uint64) error {
	for {
		c.mu.Lock()
		ok, wait := c.m.rev >= rev && c.synced, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
	}
}

// Close stops Run; it is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		if c.cancel != nil {
			c.cancel()
		}
		c.notifyLocked()
	}
	return nil
}
