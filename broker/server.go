package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/fabric"
)

// Server is one broker: it accepts agents over mutual TLS, commits their
// publishes to the Store and streams the catalog to them. It keeps no
// state of its own beyond open connections.
type Server struct {
	cfg   Config
	log   *slog.Logger
	id    *fabric.Identity
	store Store
	ln    net.Listener

	wg        sync.WaitGroup
	closeOnce sync.Once
	cancel    context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	hub   *hub

	// Counters, for tests and the bench.
	Rejected  atomic.Uint64 // connections closed for a protocol or identity error
	Published atomic.Uint64 // publish frames committed
}

// New loads the identity, opens the store and listens; Run serves.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := fabric.Load(fabric.Config{Dir: cfg.Identity.Dir, Cluster: cfg.ID, Broker: true,
		CertFile: cfg.Identity.Cert, KeyFile: cfg.Identity.Key, CAFile: cfg.Identity.CA, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	var st Store
	if cfg.Store.Path != "" {
		st, err = OpenBolt(cfg.Store.Path, cfg.Store.History)
	} else {
		st, err = OpenEtcd(context.Background(), EtcdConfig{Endpoints: cfg.Store.Etcd, Prefix: cfg.Store.Prefix, MaxTxnOps: cfg.Store.MaxTxnOps,
			LeaseTTL: int64(cfg.Store.LeaseTTL / time.Second)})
	}
	if err != nil {
		return nil, err
	}
	s, err := NewWithStore(cfg, id, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return s, nil
}

// NewWithStore serves an already open store (which Close then closes).
func NewWithStore(cfg Config, id *fabric.Identity, st Store) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.listen())
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.listen(), err)
	}
	return &Server{cfg: cfg, log: log.With("broker", cfg.ID), id: id, store: st, ln: ln, conns: map[net.Conn]struct{}{},
		hub: newHub(hubWindow)}, nil
}

// Addr returns the address the broker listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func (s *Server) advertise() string {
	if s.cfg.Advertise != "" {
		return s.cfg.Advertise
	}
	return s.ln.Addr().String()
}

func (s *Server) spawn(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Run serves until ctx is done or Close, and returns after every
// connection's goroutines exited.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	defer s.Close()
	stop, err := s.store.Ephemeral(ctx, prefixBroker+s.cfg.ID, mustJSON(brokerInfo{Addr: s.advertise()}))
	if err != nil {
		cancel()
		return fmt.Errorf("announce broker: %w", err)
	}
	defer stop()
	s.log.Info("broker listening", "addr", s.ln.Addr().String(), "advertise", s.advertise())
	s.spawn(func() { s.placementLoop(ctx) })
	s.spawn(func() {
		if err := s.hub.run(ctx, s.store); err != nil {
			// Connections then read the store themselves.
			s.log.Warn("delta hub stopped", "err", err)
		}
	})
	s.spawn(func() {
		<-ctx.Done()
		s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	var acceptErr error
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				acceptErr = fmt.Errorf("accept: %w", err)
			}
			break
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.spawn(func() {
			s.serveConn(ctx, c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		})
	}
	cancel()
	s.wg.Wait()
	return acceptErr
}

// Close stops Run (which then returns) and closes the store; idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	var err error
	s.closeOnce.Do(func() {
		s.ln.Close()
		s.wg.Wait()
		err = s.store.Close()
	})
	return err
}

// frameWriter serializes frames from the streaming and the reading
// goroutine of one connection.
type frameWriter struct {
	mu sync.Mutex
	bw *bufio.Writer
	c  net.Conn
}

// sendRaw writes already encoded frames.
func (w *frameWriter) sendRaw(data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := w.bw.Write(data); err != nil {
		return err
	}
	return w.bw.Flush()
}

func (w *frameWriter) send(m *message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(w.bw, m); err != nil {
		return err
	}
	return w.bw.Flush()
}

const handshakeTimeout = 10 * time.Second

func (s *Server) serveConn(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	conf := s.id.ServerTLS()
	conf.ClientAuth = tls.RequireAnyClientCert
	tc := tls.Server(raw, conf)
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		s.Rejected.Add(1)
		s.log.Warn("agent refused", "remote", raw.RemoteAddr().String(), "reason", fabric.Classify(err), "err", err)
		return
	}
	cluster, err := s.id.PeerCluster(tc.ConnectionState())
	if err != nil {
		s.Rejected.Add(1)
		s.log.Warn("agent refused", "remote", raw.RemoteAddr().String(), "err", err)
		return
	}
	log := s.log.With("cluster", cluster, "remote", raw.RemoteAddr().String())
	w := &frameWriter{bw: bufio.NewWriterSize(tc, 64<<10), c: tc}
	br := bufio.NewReaderSize(tc, 64<<10)
	reject := func(err error) {
		s.Rejected.Add(1)
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			pe = &ProtocolError{Code: CodeInternal, Msg: err.Error()}
		}
		log.Warn("connection closed", "code", pe.Code, "reason", pe.Msg)
		_ = w.send(&message{T: msgError, Code: pe.Code, Msg: pe.Msg})
	}
	hello, err := readFrame(br)
	if err != nil {
		if !isEOF(err) {
			reject(err)
		}
		return
	}
	tc.SetDeadline(time.Time{})
	if hello.T != msgHello {
		reject(protoErr(CodeMalformed, "first frame: %s, want hello", hello.T))
		return
	}
	if hello.Cluster != cluster {
		reject(protoErr(CodeForbidden, "hello names cluster %q, the certificate is cluster %q's", hello.Cluster, cluster))
		return
	}
	cur, err := s.store.Revision(ctx)
	if err != nil {
		reject(err)
		return
	}
	if hello.Since > cur {
		reject(protoErr(CodeFuture, "resume from revision %d: the catalog is at %d (a replayed or foreign revision)", hello.Since, cur))
		return
	}
	own, _, err := s.store.Get(ctx, metaKey(cluster))
	if err != nil {
		reject(err)
		return
	}
	if err := w.send(&message{T: msgWelcome, Broker: s.cfg.ID, Cluster: cluster, Rev: cur, Own: own.ModRev}); err != nil {
		return
	}
	log.Debug("agent connected", "since", hello.Since)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sendWG sync.WaitGroup
	sendWG.Add(1)
	go func() {
		defer sendWG.Done()
		if err := s.stream(cctx, w, hello.Since); err != nil && cctx.Err() == nil {
			log.Warn("catalog stream ended", "err", err)
			tc.Close()
		}
	}()
	defer sendWG.Wait()
	defer tc.Close()   // unblocks the stream's writes
	var lastRev uint64 // of this connection's last publish, for cont
	for {
		m, err := readFrame(br)
		if err != nil {
			if !isEOF(err) && cctx.Err() == nil {
				reject(err)
			}
			return
		}
		if m.T != msgPublish {
			reject(protoErr(CodeMalformed, "%s frame from an agent: only publish after hello", m.T))
			return
		}
		if m.Cont {
			if lastRev == 0 {
				reject(protoErr(CodeMalformed, "publish seq %d: cont without an earlier publish on this connection", m.Seq))
				return
			}
			m.Base = lastRev
		}
		rev, err := s.publish(cctx, cluster, m)
		lastRev = rev
		if err != nil {
			reject(err)
			return
		}
		s.Published.Add(1)
		if err := w.send(&message{T: msgAck, Seq: m.Seq, Rev: rev}); err != nil {
			return
		}
	}
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF)
}

// publish commits one publish frame of cluster: only keys under its own
// prefix, conditioned on its base revision.
func (s *Server) publish(ctx context.Context, cluster string, m *message) (uint64, error) {
	if m.Cluster != cluster {
		return 0, protoErr(CodeForbidden, "publish for cluster %q on a connection of cluster %q: a cluster writes only its own entries", m.Cluster, cluster)
	}
	puts := make([]Entry, 0, len(m.Put)+2)
	puts = append(puts, Entry{Key: metaKey(cluster), Value: []byte("{}")})
	if m.Gateways != nil {
		puts = append(puts, Entry{Key: gwKey(cluster), Value: mustJSON(*m.Gateways)})
	}
	for _, e := range m.Put {
		puts = append(puts, Entry{Key: exportKey(cluster, e.Key()), Value: encodeExport(e)})
	}
	dels := make([]string, len(m.Del))
	for i, k := range m.Del {
		dels[i] = exportKey(cluster, k)
	}
	rev, err := s.store.Commit(ctx, Cond{Key: metaKey(cluster), ModRev: m.Base}, puts, dels)
	if errors.Is(err, ErrConflict) {
		return 0, protoErr(CodeStale, "publish seq %d: base revision %d is not the latest of cluster %s's entries (a replayed or superseded publish); resync and publish again", m.Seq, m.Base, cluster)
	}
	return rev, err
}

// hubWindow is how many bytes of recent delta frames the hub keeps.
const hubWindow = 64 << 20

// stream sends the catalog to one agent: deltas after since, or a
// snapshot first when since is 0 or compacted away. Deltas come from the
// hub while the agent keeps up, from the store otherwise.
func (s *Server) stream(ctx context.Context, w *frameWriter, since uint64) error {
	snapshot := since == 0
	for {
		if snapshot {
			entries, rev, err := s.store.Snapshot(ctx)
			if err != nil {
				return err
			}
			sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
			if err := sendEntries(w, msgSnapshot, rev, entries); err != nil {
				return err
			}
			since, snapshot = rev, false
		}
		var err error
		var inWindow bool
		if since, inWindow, err = s.hub.follow(ctx, w, since); err != nil {
			return err
		}
		if inWindow {
			continue
		}
		// Outside the hub's window: read the store until caught up with
		// the hub, then switch back.
		wctx, cancel := context.WithCancel(ctx)
		err = s.store.Watch(wctx, since, func(rev uint64, evs []Entry) error {
			since = rev
			if err := sendEntries(w, msgDelta, rev, evs); err != nil {
				return err
			}
			if _, _, ok := s.hub.after(since); ok {
				cancel()
			}
			return nil
		})
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrCompacted):
			snapshot = true
		case err != nil && !errors.Is(err, context.Canceled):
			return err
		case err == nil:
			return nil
		}
		if !snapshot {
			// Not yet in the hub's window (it may not have started):
			// avoid spinning between the two.
			if _, _, ok := s.hub.after(since); !ok {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
	}
}

// sendEntries sends entries as frames of type t of at most snapshotChunk
// entries; all but the last have More set.
func sendEntries(w *frameWriter, t string, rev uint64, entries []Entry) error {
	var buf bytes.Buffer
	if err := encodeEntries(&buf, t, rev, entries); err != nil {
		return err
	}
	return w.sendRaw(buf.Bytes())
}
