package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// session is the strait multiplexer over one connection. Three goroutines
// run per session: the reader (frames in), the writer (frames out, batched
// in a buffered writer flushed when its queue is empty) and the keepalive.
// A stream's Write that finds the writer idle writes its frame itself
// (writeInline); the fields marked "writer role" belong to whoever holds
// the role (s.writing), the writer goroutine or such a Write.
type session struct {
	conn        net.Conn
	rd          io.Reader
	bw          *bufio.Writer        // writer role
	hb          [frameHeaderLen]byte // a frame header being written (writer role)
	batch       *recordBatcher       // below TLS; nil on other connections
	ramp        int                  // small records written since the writer was idle (writer role)
	bulkRun     int                  // DATA bytes written since the last bulk look (writer role)
	ccUpgrade   string               // congestion control to switch to at the first lossy bulk transfer (writer role)
	bulkRetrans uint32               // the socket's retransmissions at the last bulk check (writer role)
	bulkLookAt  time.Time            // when that check was (writer role)
	idleSince   time.Time            // when the writer last ran dry; zero while it writes (writer role)
	client      bool
	peer        string
	congestion  atomic.Pointer[string]
	cfg         *Config
	log         *slog.Logger
	start       time.Time

	mu         sync.Mutex // guards the fields below
	streams    map[uint32]*stream
	nextID     uint32 // next ID we open
	lastPeerID uint32 // highest ID the peer opened
	goAway     string // reason from the peer's GOAWAY
	learned    uint64 // largest stream window reached; new streams start near it
	acceptQ    chan *stream

	fmu       sync.Mutex // session-level flow control
	sendLimit uint64
	sent      uint64
	sendWake  chan struct{} // closed and replaced when sendLimit grows
	recv      recvWindow
	received  uint64
	// Receive windows above initialStreamWindow, summed over the streams,
	// come from growBudget (sessionCredit).
	growBudget, growUsed uint64

	wmu     sync.Mutex // writer queue
	ctrlQ   []*writeReq
	dataQ   []*writeReq
	wclosed bool
	writing bool // the writer role is held: bw and the fields marked so are in use
	wsig    chan struct{}
	drained []*writeReq // queued requests writeInline wrote (writer role)

	closeOnce sync.Once
	closed    chan struct{}
	err       error
	wg        sync.WaitGroup

	lastRecv atomic.Int64 // nanoseconds since start
	// busySince is when the session last went from no streams to one
	// (nanoseconds since start): an idle session's silence is judged by
	// the idle limit, a busy one's from then on (keepalive).
	busySince atomic.Int64
	pooled    atomic.Bool // a Pool probes this session (takeProbes)
	// kaInterval overrides cfg.KeepaliveInterval when set (a Pool's
	// SetProbeInterval), and kaKick makes the keepalive loop take it now.
	kaInterval atomic.Int64
	kaKick     chan struct{}
	srtt       atomic.Int64
	minRTT     atomic.Int64 // windowed minimum of the samples, see noteMinRTT
	// The reader goroutine's state of the windowed minimum.
	curMin, prevMin, minEpoch time.Duration
	st                        counters
}

type counters struct {
	streamsOpened, streamsAccepted, streamsRefused atomic.Uint64
	resetsSent, resetsReceived                     atomic.Uint64
	bytesSent, bytesReceived                       atomic.Uint64
	framesSent, framesReceived                     atomic.Uint64
	pingsSent, pongsReceived                       atomic.Uint64
	directWrites                                   atomic.Uint64 // frames the reader wrote to a WriteTo's socket (directSink)
	keepaliveWakes                                 atomic.Uint64 // times the keepalive loop ran (timer or interval change), for tests
}

type writeReq struct {
	hdr     frameHeader
	payload []byte
	done    chan error // nil: nobody waits
	flush   bool       // flush before signalling done (last words)
}

// newSession starts the multiplexer on conn. cfg must have defaults
// applied. batch, when not nil, is the writer under conn's TLS records,
// corked while the writer has work queued.
func newSession(conn net.Conn, batch *recordBatcher, client bool, peer, congestion, upgrade string, cfg *Config) *session {
	now := time.Now()
	s := &session{
		conn:      conn,
		batch:     batch,
		rd:        conn,
		bw:        bufio.NewWriterSize(conn, 64<<10),
		client:    client,
		peer:      peer,
		ccUpgrade: upgrade,
		cfg:       cfg,
		log:       cfg.logger(),
		start:     now,
		streams:   make(map[uint32]*stream),
		nextID:    2,
		acceptQ:   make(chan *stream, cfg.AcceptBacklog),
		sendLimit: initialSessionWindow,
		sendWake:  make(chan struct{}),
		recv:      newRecvWindow(initialSessionWindow, uint64(cfg.MaxSessionWindow), now),
		learned:   initialStreamWindow,
		wsig:      make(chan struct{}, 1),
		closed:    make(chan struct{}),
		kaKick:    make(chan struct{}, 1),
	}
	s.growBudget = uint64(cfg.MaxSessionWindow)
	s.congestion.Store(&congestion)
	if client {
		s.nextID = 1
	}
	// crypto/tls decrypts a record into its own buffer and Read copies from
	// there, so small header reads are cheap; a plain conn gets a buffer.
	if _, ok := conn.(*tls.Conn); !ok {
		s.rd = bufio.NewReaderSize(conn, 64<<10)
	}
	// Announce the real session window and measure the RTT right away, so
	// auto-tuning has a round-trip time before the first bulk transfer.
	if l, ok := s.recv.grow(uint64(cfg.InitialSessionWindow)); ok {
		s.queueWindow(0, l)
	}
	s.sendPing()
	s.wg.Add(3)
	go s.readLoop()
	go s.writeLoop()
	go s.keepalive()
	return s
}

func (s *session) now() int64 { return int64(time.Since(s.start)) }

func (s *session) Peer() string          { return s.peer }
func (s *session) Done() <-chan struct{} { return s.closed }
func (s *session) RTT() time.Duration    { return time.Duration(s.srtt.Load()) }
func (s *session) LocalAddr() net.Addr   { return s.conn.LocalAddr() }
func (s *session) RemoteAddr() net.Addr  { return s.conn.RemoteAddr() }
func (s *session) String() string        { return "session to " + s.peer }
func (s *session) closedErr() error      { return fmt.Errorf("session to %s: %w", s.peer, s.Err()) }
func (s *session) isClosed() bool        { return chanClosed(s.closed) }
func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *session) Err() error {
	select {
	case <-s.closed:
		return s.err
	default:
		return nil
	}
}

func (s *session) Stats() Stats {
	return Stats{
		StreamsOpened:   s.st.streamsOpened.Load(),
		StreamsAccepted: s.st.streamsAccepted.Load(),
		StreamsRefused:  s.st.streamsRefused.Load(),
		ResetsSent:      s.st.resetsSent.Load(),
		ResetsReceived:  s.st.resetsReceived.Load(),
		BytesSent:       s.st.bytesSent.Load(),
		BytesReceived:   s.st.bytesReceived.Load(),
		FramesSent:      s.st.framesSent.Load(),
		FramesReceived:  s.st.framesReceived.Load(),
		PingsSent:       s.st.pingsSent.Load(),
		PongsReceived:   s.st.pongsReceived.Load(),
		RTT:             s.RTT(),
		StreamWindow:    s.learnedWindow(),
		Congestion:      *s.congestion.Load(),
	}
}

// startWindow is the receive window of a new stream (s.mu held): the
// largest one auto-tuning reached, so a short transfer on a warm session
// needs no ramp-up, but at most a sixteenth of the session window, so a few
// new streams whose readers stall cannot take the whole growth budget
// (sessionCredit); what the budget lacks, they start without.
func (s *session) startWindow() uint64 {
	return max(initialStreamWindow, min(s.learned, uint64(s.cfg.MaxSessionWindow)/16))
}

func (s *session) learnedWindow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.learned
}

// Close sends GOAWAY (waiting briefly for it to leave), closes the
// connection and waits for the session's goroutines.
func (s *session) Close() error {
	if !s.isClosed() {
		s.lastWords("closed", 250*time.Millisecond)
	}
	s.closeWithError(ErrSessionClosed)
	s.wg.Wait()
	return nil
}

// lastWords sends GOAWAY with reason and waits up to d for it to be
// flushed to the connection.
func (s *session) lastWords(reason string, d time.Duration) {
	reason = reason[:min(len(reason), maxReasonLen)]
	done := make(chan error, 1)
	r := &writeReq{hdr: frameHeader{typ: frameGoAway, length: uint16(len(reason))}, payload: []byte(reason), done: done, flush: true}
	if s.enqueue(r, true) != nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-s.closed:
	}
}

// closeWithError ends the session with err (the first error wins).
func (s *session) closeWithError(err error) {
	s.closeOnce.Do(func() {
		s.err = err
		close(s.closed)
		_ = s.conn.Close()
		s.wmu.Lock()
		notify(s.wsig)
		s.wmu.Unlock()
	})
}

// ---- writing ----

// enqueue hands a frame to the writer. Control frames go ahead of data.
// The writer goroutine is woken only when nobody holds the writer role:
// a holder looks at the queues before it lets the role go (writeLoop,
// writeInline), so a wake-up then would find nothing to do.
func (s *session) enqueue(r *writeReq, ctrl bool) error {
	s.wmu.Lock()
	if s.wclosed {
		s.wmu.Unlock()
		return s.closedErr()
	}
	if ctrl {
		s.ctrlQ = append(s.ctrlQ, r)
	} else {
		s.dataQ = append(s.dataQ, r)
	}
	held := s.writing
	s.wmu.Unlock()
	if !held {
		notify(s.wsig)
	}
	return nil
}

// popFront takes the first request off a non-empty queue. A queue that
// empties starts again at the front of its array, keeping its capacity:
// popping by reslicing alone shrinks the capacity to nothing, so a queue
// that is usually one frame long (a new stream's open, its data, its FIN)
// allocated a new array for nearly every frame.
func popFront(q *[]*writeReq) *writeReq {
	r := (*q)[0]
	(*q)[0] = nil
	if len(*q) == 1 {
		*q = (*q)[:0]
	} else {
		*q = (*q)[1:]
	}
	return r
}

func (s *session) queueCtrl(h frameHeader, payload []byte) {
	h.length = uint16(len(payload))
	_ = s.enqueue(&writeReq{hdr: h, payload: payload}, true)
}

func (s *session) queueWindow(id uint32, limit uint64) {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, limit)
	s.queueCtrl(frameHeader{typ: frameWindow, stream: id}, b)
}

func (s *session) queueReset(id uint32, reason string) {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	s.st.resetsSent.Add(1)
	s.queueCtrl(frameHeader{typ: frameReset, stream: id}, []byte(reason))
}

func (s *session) sendPing() {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(s.now()))
	s.st.pingsSent.Add(1)
	s.queueCtrl(frameHeader{typ: framePing}, b)
}

func (s *session) writeLoop() {
	defer s.wg.Done()
	var err error
	held, yielded, corked := false, false, false
	for err == nil {
		s.wmu.Lock()
		if !held && s.writing {
			// A Write holds the role (writeInline); it signals wsig when
			// it leaves with frames queued.
			s.wmu.Unlock()
			err = s.waitWork()
			continue
		}
		var r *writeReq
		switch {
		case len(s.ctrlQ) > 0:
			r = popFront(&s.ctrlQ)
		case len(s.dataQ) > 0:
			r = popFront(&s.dataQ)
		}
		if r != nil && !held {
			s.writing, held = true, true
		}
		s.wmu.Unlock()
		if r == nil {
			if !held {
				err = s.waitWork()
				continue
			}
			if s.bw.Buffered() > 0 && !yielded {
				// A producer that was just woken (a Write right after
				// OpenStream, a reply to a read) often enqueues within
				// microseconds: let it, so both share one record.
				yielded = true
				runtime.Gosched()
				continue
			}
			yielded = false
			if err = s.flush(); err != nil {
				break
			}
			corked = false
			s.wentIdle()
			// The role goes back only with both queues empty, checked
			// under wmu: a frame queued after that check wakes this
			// loop through wsig, and one queued before it is written now.
			s.wmu.Lock()
			if len(s.ctrlQ) == 0 && len(s.dataQ) == 0 {
				s.writing, held = false, false
			}
			s.wmu.Unlock()
			continue
		}
		yielded = false
		if !corked && s.batch != nil {
			s.batch.cork()
			corked = true
		}
		s.resumeWriting()
		err = s.writeReq(r)
		s.countData(r)
		if err == nil && r.flush {
			err = s.flush()
			corked = false
		}
		if r.done != nil {
			r.done <- err
		}
	}
	if !s.isClosed() {
		s.closeWithError(fmt.Errorf("write: %w", err))
	}
	s.wmu.Lock()
	s.wclosed = true
	q := append(s.ctrlQ, s.dataQ...)
	s.ctrlQ, s.dataQ = nil, nil
	s.wmu.Unlock()
	cerr := s.closedErr()
	for _, r := range q {
		if r.done != nil {
			r.done <- cerr
		}
	}
}

// waitWork blocks the writer goroutine until a frame may be queued (wsig)
// or the session ends.
func (s *session) waitWork() error {
	select {
	case <-s.wsig:
		return nil
	case <-s.closed:
		return s.closedErr()
	}
}

// writeInline writes r from the calling goroutine when the writer is idle
// with nothing queued but control frames, which it writes first, as the
// writer would have: a request through a gateway then crosses no goroutine
// handoff on its way out, where waking the writer and waiting for it cost
// two (README, "Performance"). With the writer busy or data queued it
// returns false and the caller queues r, so streams still take turns and
// small frames still share records while the writer has work. It returns
// the error of writing r, after which the session is closed.
func (s *session) writeInline(r *writeReq) (bool, error) {
	s.wmu.Lock()
	if s.wclosed {
		s.wmu.Unlock()
		return true, s.closedErr()
	}
	if s.writing || len(s.dataQ) > 0 {
		s.wmu.Unlock()
		return false, nil
	}
	s.writing = true
	ctrl := s.ctrlQ
	s.ctrlQ = nil
	s.wmu.Unlock()

	if s.batch != nil {
		s.batch.cork()
	}
	s.resumeWriting()
	var err error
	for _, c := range ctrl {
		if err == nil {
			err = s.writeReq(c)
		}
	}
	if err == nil {
		err = s.writeReq(r)
		s.countData(r)
	}
	var drained []*writeReq
	if err == nil {
		// The goroutines ready to run go first: readers the poller woke
		// with this one (other connections' requests) find the role
		// held and queue their frames, which then share this flush, one
		// write(2) for all, where each would have written its own.
		// When nothing else is ready this costs a trip through the
		// scheduler. Offered 30 000 and 40 000 requests/s of 1 KB over
		// 100 connections, gateways on one P, the pair took 0.29–0.33 s
		// of CPU per 10 000 requests with it and 0.39–0.52 without, and
		// at 40 000/s answered 30 800–31 700 requests/s against
		// 17 600–24 800 (README, "Keep-alive request/response").
		runtime.Gosched()
		drained, err = s.writeQueued()
	}
	if err == nil {
		err = s.flush()
	} else if s.batch != nil {
		_ = s.batch.uncork()
	}
	if err == nil {
		s.wentIdle()
	}

	for i, c := range ctrl {
		if c.done != nil {
			c.done <- err
		}
		ctrl[i] = nil
	}
	for i, q := range drained {
		if q.done != nil {
			q.done <- err
		}
		drained[i] = nil
	}
	s.drained = drained[:0]
	s.wmu.Lock()
	s.writing = false
	if s.ctrlQ == nil {
		// Keep the array, which the queue reuses (popFront).
		s.ctrlQ = ctrl[:0]
	}
	more := len(s.ctrlQ) > 0 || len(s.dataQ) > 0
	s.wmu.Unlock()
	if err != nil {
		s.closeWithError(fmt.Errorf("write: %w", err))
		return true, err
	}
	if more {
		notify(s.wsig)
	}
	return true, nil
}

// writeQueued writes what was queued while a Write held the role inline
// (writer role) — Writes of other streams that found the role taken,
// control frames — so that it shares the Write's flush instead of waking
// the writer goroutine: control frames, and data in order up to
// inlineBatch bytes and maxInlineBatch frames, so the Write's own frame is
// not held back long; the writer takes the rest. It returns the requests
// it wrote, to be signalled after the flush.
func (s *session) writeQueued() ([]*writeReq, error) {
	drained := s.drained[:0]
	var err error
	for budget := inlineBatch; err == nil && len(drained) < maxInlineBatch; {
		s.wmu.Lock()
		var q *writeReq
		switch {
		case len(s.ctrlQ) > 0:
			q = popFront(&s.ctrlQ)
		case len(s.dataQ) > 0 && len(s.dataQ[0].payload) <= budget:
			q = popFront(&s.dataQ)
		}
		s.wmu.Unlock()
		if q == nil {
			break
		}
		budget -= len(q.payload)
		err = s.writeReq(q)
		s.countData(q)
		drained = append(drained, q)
	}
	return drained, err
}

// inlineBatch bounds the data a Write writing inline takes from the queue
// for its flush, and maxInlineBatch the frames: enough for the requests
// of many keep-alive connections arriving together, one write(2) for all
// of them.
const (
	inlineBatch    = 64 << 10
	maxInlineBatch = 64
)

// resumeWriting is called by the writer role before it writes a request:
// after an idle gap the records start small again (rampRecords).
func (s *session) resumeWriting() {
	if !s.idleSince.IsZero() && time.Since(s.idleSince) >= rampAfterIdle {
		s.ramp = 0
	}
	s.idleSince = time.Time{}
}

// countData counts r's DATA toward the bulk look (writer role).
func (s *session) countData(r *writeReq) {
	if r.hdr.typ == frameData {
		s.bulkRun += len(r.payload)
		if s.ccUpgrade != "" && s.bulkRun >= bulkBytes {
			s.bulkLook()
		}
	}
}

// wentIdle is called by the writer role when everything it wrote is
// flushed and nothing waits.
func (s *session) wentIdle() {
	// A burst is in the kernel now: what its window could not send is
	// still there (see bulkBacklog).
	if s.ccUpgrade != "" && s.bulkRun >= bulkBacklog {
		s.bulkLook()
	}
	s.idleSince = time.Now()
}

// The first records after the writer idled are small and grow one TCP
// segment at a time, as crypto/tls's dynamic record sizing does at the start
// of a connection, except that it never starts over on a long-lived one.
// The receiving gateway cannot decrypt, and so cannot forward, a byte of a
// record before its last segment arrived; with one 16 KiB record for a 10 KB
// request, every gateway on the path would hold the request until its last
// packet came in, which with seed 000's edg10 jitter (1 ms per link) adds up
// over four TLS ends. Small records let gateways forward segment by
// segment, as a TCP relay would. (At edg10 a 10 KB echo's fastest request
// went from 35.2 to 34.4 ms with them, direct's being 32.8 and 33.5 ms in
// the same two runs, on a loaded host.)
const (
	rampRecords         = 8
	rampRecordPlaintext = 1448 - 22 // a 1500-byte MTU segment's payload less TLS 1.3's record overhead
	rampAfterIdle       = time.Millisecond
)

// A session switches to its bulk congestion control (Config.Congestion)
// when it carries bulk data over a path that loses it. It looks at its
// socket every bulkBytes of DATA, and when its writer runs dry after at
// least bulkBacklog of DATA (a burst is then in the kernel: looks while the
// writer gathers records see only earlier bursts, long delivered when
// requests and responses alternate): if the kernel retransmitted segments
// since the last look and at least bulkBacklog waits in the socket unsent,
// the network, not the application, sets the pace, and it switches. That is
// where loss-based algorithms fall behind (cubic cuts its window at every
// loss and, carrying bursts, never grows it back; strait's own, which cuts
// less, still cuts at each of many losses a second) and bbr keeps the link
// full. A LAN loses nothing, so it stays unpaced however much it carries.
// (Counting only bytes written without an idle gap, as an earlier version
// did, missed bulk that the streams' flow-control windows pace: their
// writer idles a few ms every round trip.)
const bulkBytes = 512 << 10

// bulkBacklog is the unsent backlog that makes a lossy session a bulk one.
// A request or response under it never counts, however small the window a
// loss left: an earlier rule took any unsent byte as bulk, a keep-alive
// 10 KB echo at seed 001's cloud10 (0.08 % loss) met it within a second,
// and the session went to bbr, which paces each response at the rate the
// last ones showed it. Transfers of 100 KB and more do count: at cloud30
// (0.24 % loss) a 100 KB echo took 185 ms on cubic and 93 on bbr, 1 MB
// 2.4 s and 0.12 s (README, "Performance"). The backlog of bulk that cubic
// cannot carry is bounded by the stream's flow-control window (256 KiB at
// first), not by the socket, so the threshold stays well under that; and
// under half of Config.NotSentLowWater, which bounds what a socket holds
// unsent.
const bulkBacklog = 64 << 10

// bulkEvidenceAge bounds how old the last look may be for the
// retransmissions since then to count: over a longer gap they may be
// another stretch's (small requests over a path that was lossy then), and
// the look only takes the count anew. A lossy bulk transfer looks every
// bulkBytes or every burst, well within it, and switches at its second look.
const bulkEvidenceAge = time.Second

// sockState is what a look at the socket finds.
type sockState struct {
	retrans    uint32 // segments retransmitted so far, less reported duplicates
	notsent    uint32 // bytes waiting unsent
	cwnd       uint64 // bytes the congestion window lets into flight
	peerWindow uint64 // bytes the peer's receive window lets into flight
}

// lossyBulk is the switch rule: more retransmissions than at the last look
// (retrans0; the count falls as duplicates are reported, and wraps), that
// look no longer than bulkEvidenceAge ago (sinceLook), at least
// bulkBacklog unsent, and the congestion window, not the peer's receive
// window, holding it back: a receiver that reads slowly (or drops what
// overflows its buffer) is no case for bbr, which only paces.
func lossyBulk(retrans0 uint32, sinceLook time.Duration, st sockState, lowWater int) bool {
	if sinceLook > bulkEvidenceAge {
		return false
	}
	backlog := uint64(bulkBacklog)
	if lowWater > 0 {
		backlog = min(backlog, max(uint64(lowWater)/2, 1))
	}
	return int32(st.retrans-retrans0) > 0 && uint64(st.notsent) >= backlog && st.cwnd < st.peerWindow
}

// The congestion controls of Config.Congestion's default besides strait's
// own (ownCongestion): the one a session starts with where the kernel cannot
// take strait's, and the one it switches to for bulk.
const (
	burstCongestion = "cubic"
	bulkCongestion  = "bbr"
)

// bulkLook applies the switch rule to the socket (writer role).
func (s *session) bulkLook() {
	s.bulkRun = 0
	if s.batch == nil {
		return
	}
	if st, ok := lossState(s.batch.Conn); ok {
		now := time.Now()
		if lossyBulk(s.bulkRetrans, now.Sub(s.bulkLookAt), st, s.cfg.NotSentLowWater) {
			s.upgradeCongestion()
		}
		s.bulkRetrans, s.bulkLookAt = st.retrans, now
	}
}

// upgradeCongestion switches the socket to the bulk congestion control
// (writer role), once.
func (s *session) upgradeCongestion() {
	want := s.ccUpgrade
	s.ccUpgrade = ""
	if s.batch == nil {
		return
	}
	got := setCongestion(s.batch.Conn, want)
	switch {
	case got == want:
		s.congestion.Store(&got)
		s.log.Info("congestion control switched for bulk", "peer", s.peer, "congestion", got)
	case got != "":
		// The kernel has it (tuneTCP read that) but refused this process:
		// without CAP_NET_ADMIN only tcp_allowed_congestion_control counts.
		s.log.Warn("congestion control for bulk refused; add it to net.ipv4.tcp_allowed_congestion_control", "peer", s.peer, "want", want, "congestion", got)
	}
}

// flush hands everything buffered to the kernel: the frames gathered in bw
// become TLS records, and the records gathered below TLS one write(2).
func (s *session) flush() error {
	if s.bw.Buffered() > 0 {
		if err := s.bw.Flush(); err != nil {
			return err
		}
	}
	if s.batch != nil {
		return s.batch.uncork()
	}
	return nil
}

// writeReq writes one request, splitting DATA into frames of dataFrameSize.
// FIN goes on the last frame only.
func (s *session) writeReq(r *writeReq) error {
	// The session's array, not a local one: handed to bw.Write, a local
	// escaped, one allocation per frame.
	hb := s.hb[:]
	if r.hdr.typ != frameData {
		r.hdr.encode(hb)
		s.st.framesSent.Add(1)
		if _, err := s.bw.Write(hb); err != nil {
			return err
		}
		_, err := s.bw.Write(r.payload)
		return err
	}
	p := r.payload
	for {
		n := min(len(p), dataFrameSize)
		small := s.ramp < rampRecords
		if small {
			// One TLS record per frame, sized to what the record's TCP
			// segments can carry: see rampRecords.
			n = min(n, max(rampRecordPlaintext*(s.ramp+1)-s.bw.Buffered()-frameHeaderLen, 256))
			s.ramp++
		}
		h := r.hdr
		h.length = uint16(n)
		if n < len(p) {
			h.flags &^= flagFIN
		}
		h.encode(hb)
		s.st.framesSent.Add(1)
		if _, err := s.bw.Write(hb); err != nil {
			return err
		}
		if err := s.writePayload(p[:n], small); err != nil {
			return err
		}
		if small {
			if err := s.bw.Flush(); err != nil {
				return err
			}
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// recordPlaintext is the plaintext of a full TLS record (crypto/tls's
// maxPlaintext), which it uses once a connection sent 128 KiB.
const recordPlaintext = 16 << 10

// writePayload writes a DATA frame's payload after its header. A large one
// goes to TLS straight from the caller's buffer, sparing the copy into bw:
// bw is topped up to a record boundary and flushed (whole records), then
// whole records' worth of p go to TLS directly, and only the tail is
// buffered to share a record with what follows.
func (s *session) writePayload(p []byte, small bool) error {
	if small || s.batch == nil || len(p) < 2*recordPlaintext {
		_, err := s.bw.Write(p)
		return err
	}
	lead := (recordPlaintext - s.bw.Buffered()%recordPlaintext) % recordPlaintext
	// bw's own flushes when it fills write 64 KiB, whole records, so what
	// stays buffered after lead is still a multiple of a record.
	if _, err := s.bw.Write(p[:lead]); err != nil {
		return err
	}
	if err := s.bw.Flush(); err != nil {
		return err
	}
	p = p[lead:]
	m := len(p) / recordPlaintext * recordPlaintext
	if _, err := s.conn.Write(p[:m]); err != nil {
		return err
	}
	_, err := s.bw.Write(p[m:])
	return err
}

// ---- keepalive ----

// keepalive pings when the session needs a sign of life (see needPing) and
// closes the session when nothing at all arrived for the timeout. Any frame
// counts as a sign of life, so a peer whose pong is stuck behind bulk data
// on a slow link is not declared dead.
func (s *session) keepalive() {
	defer s.wg.Done()
	interval, timeout := s.keepaliveInterval(), s.cfg.KeepaliveTimeout
	nextPing := time.Duration(s.now()) + interval
	due := nextPing
	// judgeFrom is when the peer's silence starts to count at the
	// earliest: when this loop last saw the session turn busy, or found
	// that this process had not run (below).
	var judgeFrom time.Duration
	// newSession sent the first ping.
	pr := pingRule{interval: interval, timeout: timeout, lastPing: time.Duration(s.now())}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		case <-s.kaKick:
		}
		now := time.Duration(s.now())
		if iv := s.keepaliveInterval(); iv != interval {
			// A shorter interval starts now; a longer one at the next ping.
			interval, pr.interval = iv, iv
			nextPing = min(nextPing, now+interval)
		}
		// An idle session (no streams) may be silent idleSilenceFactor
		// times longer: nothing waits on it, and its pings would only put
		// packets between other sessions' data (pingRule). A busy one is
		// judged from when it last became busy, so a stream opened on a
		// long-idle session does not find it already past the limit:
		// from when the stream's opener recorded it, or from when this
		// loop first saw it if that is later (a stream opened just before
		// this process stopped leaves a kick that wakes the loop after
		// the stop, with the idle wait's timer not yet due, so the stall
		// rule below cannot see the stop).
		wasIdle := pr.idle
		pr.idle = s.openStreams() == 0
		if wasIdle && !pr.idle {
			// The idle wait may run for seconds: decide now whether,
			// and when, the busy session pings.
			nextPing = now
			judgeFrom = now
		}
		limit, heardAt := timeout, time.Duration(s.lastRecv.Load())
		if pr.idle {
			limit *= idleSilenceFactor
		} else {
			heardAt = max(heardAt, time.Duration(s.busySince.Load()))
		}
		silent := now - heardAt
		// A wakeup half a timeout past the timer's deadline means this
		// process did not run (SIGSTOP, a starved host): the silence so
		// far may be our own reader's, which has not read what the
		// kernel holds, and a peer stopped with us has had no chance to
		// speak. The peer gets a whole limit from now (it pings after a
		// quarter of one at the latest, pingRule) — but not for ever: past
		// stuckSilenceFactor timeouts of silence a dead peer on a
		// starved host is still found. This holds for a kick too: after
		// a stall the overdue timer and a kick (the pool's new interval)
		// are ready together and select takes either; a kick before the
		// deadline is never late.
		if now-due >= timeout/2 && silent < stuckSilenceFactor*timeout {
			judgeFrom = now
		}
		judged := now - max(heardAt, judgeFrom)
		// Frames can be stuck behind a lost segment that TCP is still
		// retransmitting (a saturated, lossy path backs off for seconds)
		// while the peer's kernel keeps acknowledging: the peer is alive,
		// up to a limit that also ends a session to a hung process.
		if silent >= stuckSilenceFactor*timeout || judged >= limit && !s.kernelHears(limit) {
			s.closeWithError(fmt.Errorf("%w: nothing received for %v", ErrPeerUnresponsive, silent.Round(time.Millisecond)))
			return
		}
		if now >= nextPing {
			// A session a pool probes leaves probing to the pool, like
			// an acceptor.
			pr.client = s.client && !s.pooled.Load()
			if pr.needPing(now, silent, s.unasked()) {
				s.sendPing()
				pr.lastPing = now
			}
			nextPing = now + pr.untilDecision(now, silent)
		}
		s.st.keepaliveWakes.Add(1)
		wait := max(min(nextPing-now, limit-judged), time.Millisecond)
		due = now + wait
		t.Reset(wait) // since Go 1.23 no stale tick survives a Reset
	}
}

// keepaliveInterval is the interval the keepalive loop runs at: the one a
// Pool set (setKeepaliveInterval), else the configuration's.
func (s *session) keepaliveInterval() time.Duration {
	if d := time.Duration(s.kaInterval.Load()); d > 0 {
		return d
	}
	return s.cfg.KeepaliveInterval
}

// setKeepaliveInterval makes the keepalive loop run every d (0: the
// configuration's KeepaliveInterval) from now on. d is held below a
// quarter of the keepalive timeout: an idle acceptor pings after that
// much silence (pingRule), and a loop that woke less often would ping
// late and let its peer's timeout come near.
func (s *session) setKeepaliveInterval(d time.Duration) {
	d = min(d, s.cfg.KeepaliveTimeout/4)
	if d > 0 && d <= s.cfg.KeepaliveInterval {
		d = 0
	}
	if s.kaInterval.Swap(int64(d)) == int64(d) {
		return
	}
	s.kickKeepalive()
}

// kickKeepalive wakes the keepalive loop to decide again now; a kick
// already pending serves.
func (s *session) kickKeepalive() {
	select {
	case s.kaKick <- struct{}{}:
	default:
	}
}

// pingRule decides at every keepalive interval whether the session pings.
// Every ping costs packets on both ways of the path and a record between
// the data on the socket; on an emulated WAN link each packet also costs the
// emulator CPU that the measured requests need (docs/failover.md, "What the
// probes cost"). So a session pings only when it lacks a sign of life:
//
//   - The dialer pings an interval in which it heard nothing from the peer
//     but pongs. Data, window updates and the peer's own pings prove the
//     peer alive without being asked, so a busy session sends no probes;
//     an idle one gets a pong per interval, which is what the pool's
//     silence check (poolhealth.go) reads.
//   - The acceptor leaves probing to the dialer, whose pings it answers.
//     Only its keepalive timeout judges the peer (pools watch dialed
//     sessions), so it pings only after a quarter of the timeout (and at
//     least two intervals) without any frame: a dialer that stalled or
//     died, whose kernel then has something to acknowledge (kernelHears).
//   - A dialed session in a Pool leaves probing to the pool, which pings
//     one session of a gateway once the gateway has been quiet for most
//     of the silence window, and none while any of them hears something
//     unasked (Pool.probe): a gateway needs one sign of life per window,
//     not one per session.
//   - Either side of a session that carries streams pings at least every
//     rttPingPeriod, so the round-trip time that sizes flow-control
//     windows (tuneRTT) and feeds OnRTT stays current on busy sessions
//     too.
//   - A session without streams (most of a gateway's eight sessions per
//     peer gateway, most of the time) pings only after idleSilenceFactor
//     times that much silence, and needs no RTT sample: with a ping a
//     second on every idle session, control frames outnumbered the
//     requests of a keep-alive cell on a WAN, and each can hold a request
//     back by up to the jitter where it keeps packets in order.
type pingRule struct {
	client            bool
	idle              bool // no streams: silence allowed idleSilenceFactor times longer
	interval, timeout time.Duration
	lastPing          time.Duration // session time of the last ping sent
	heard             uint64        // frames other than pongs at the last decision
}

// unasked counts the frames received that were not pongs: the signs of
// life the session did not ask for. Pongs are loaded first: the reader
// counts a frame before it knows it is a pong, so this order can only
// count a pong as unasked, which skips one probe that the next interval
// sends.
func (s *session) unasked() uint64 {
	pongs := s.st.pongsReceived.Load()
	return s.st.framesReceived.Load() - pongs
}

// takeProbes hands probing to a Pool: the session's own keepalive then
// pings only as an acceptor does, and the pool calls probe.
func (s *session) takeProbes() { s.pooled.Store(true) }

// probe sends a ping now.
func (s *session) probe() { s.sendPing() }

// rttPingPeriod is the longest a session goes without a ping (and so an
// RTT sample): well inside minRTTWindow, and rare enough to cost nothing.
const rttPingPeriod = time.Second

// needPing reports whether to ping now; heard counts the frames received
// that were not pongs, silent is the time since the last frame of any kind.
func (r *pingRule) needPing(now, silent time.Duration, heard uint64) bool {
	unasked := heard != r.heard
	r.heard = heard
	switch {
	case !r.idle && now-r.lastPing >= rttPingPeriod:
		return true
	case r.client:
		return !unasked
	default:
		return silent >= r.quietLimit()
	}
}

// quietLimit is how much silence makes a session that leaves probing to
// its peer or its pool ping: a quarter of the time that ends it.
func (r *pingRule) quietLimit() time.Duration {
	limit := r.timeout
	if r.idle {
		limit *= idleSilenceFactor
	}
	return max(2*r.interval, limit/4)
}

// idleSilenceFactor is how many keepalive timeouts a session without
// streams may be silent (and a quarter of that before it pings). Below
// stuckSilenceFactor, so a peer's kernel that answers for a hung process
// does not keep an idle session longer than a busy one.
const idleSilenceFactor = 8

// untilDecision is how long after now needPing can next answer yes, so the
// keepalive sleeps until then instead of waking every interval: a gateway
// holds many sessions (eight per peer gateway each way), and a wake-up per
// session per interval cost an idle gateway over a thousand thread wake-ups
// a second. Only a dialer that probes for itself decides every interval
// (whether the peer sent anything unasked since the last one). The others
// ping after a stretch of silence or when the RTT sample is due; a frame
// arriving meanwhile only pushes that moment later, so waking at the
// earlier estimate and deciding again loses nothing.
func (r *pingRule) untilDecision(now, silent time.Duration) time.Duration {
	if r.client {
		return r.interval
	}
	next := r.quietLimit() - silent
	if !r.idle {
		next = min(next, rttPingPeriod-(now-r.lastPing))
	}
	return max(next, r.interval)
}

// stuckSilenceFactor bounds, in keepalive timeouts, how long frames may be
// silent while the peer's kernel still answers.
const stuckSilenceFactor = 10

// kernelHears reports whether the kernel received an ACK or a segment from
// the peer within d. A peer whose process died closes the socket (its
// kernel resets the connection), and a peer cut off sends nothing at all, so
// neither passes; a live peer whose frames wait for a retransmission does.
func (s *session) kernelHears(d time.Duration) bool {
	if s.batch == nil {
		return false
	}
	silence, ok := kernelSilence(s.batch.Conn)
	return ok && silence < d
}

func (s *session) onPong(sent uint64) {
	sample := time.Duration(uint64(s.now()) - sent)
	if sample <= 0 || sent > uint64(s.now()) {
		return
	}
	s.st.pongsReceived.Add(1)
	if s.cfg.OnRTT != nil {
		s.cfg.OnRTT(sample)
	}
	s.noteMinRTT(sample)
	old := time.Duration(s.srtt.Load())
	if old == 0 {
		s.srtt.Store(int64(sample))
		return
	}
	s.srtt.Store(int64(old*7/8 + sample/8))
}

// minRTTWindow is how long a minimum round-trip sample counts: long enough
// to keep the path's propagation delay through seconds of queueing, short
// enough to follow a route that became longer.
const minRTTWindow = 10 * time.Second

// noteMinRTT keeps the smallest sample of the current and the previous
// window (reader goroutine only).
func (s *session) noteMinRTT(sample time.Duration) {
	now := time.Duration(s.now())
	if now-s.minEpoch >= minRTTWindow {
		s.prevMin, s.curMin, s.minEpoch = s.curMin, 0, now
	}
	if s.curMin == 0 || sample < s.curMin {
		s.curMin = sample
	}
	m := s.curMin
	if s.prevMin != 0 && s.prevMin < m {
		m = s.prevMin
	}
	s.minRTT.Store(int64(m))
}

// tuneRTT is the round trip that window auto-tuning sizes windows by: the
// path's minimum, not the smoothed RTT. Pongs queue behind bulk data, so
// the smoothed RTT grows with the data buffered on the path; windows sized
// by it would grow with it, buffer more and raise it further, until many
// streams sharing a slow uplink held seconds of data in the gateways.
func (s *session) tuneRTT() time.Duration {
	if m := s.minRTT.Load(); m > 0 {
		return time.Duration(m)
	}
	return s.RTT()
}

// ---- streams ----

func (s *session) OpenStream(ctx context.Context, header []byte) (Stream, error) {
	if len(header) > s.cfg.MaxHeaderSize {
		return nil, fmt.Errorf("open stream: %w: %d bytes, maximum %d", ErrHeaderTooLarge, len(header), s.cfg.MaxHeaderSize)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	s.mu.Lock()
	if s.isClosed() {
		s.mu.Unlock()
		return nil, fmt.Errorf("open stream: %w", s.closedErr())
	}
	if s.goAway != "" {
		s.mu.Unlock()
		return nil, fmt.Errorf("open stream: %w: %s", ErrGoingAway, s.goAway)
	}
	if s.nextID > 1<<32-3 {
		s.mu.Unlock()
		return nil, fmt.Errorf("open stream: %w: stream IDs exhausted", ErrGoingAway)
	}
	id := s.nextID
	s.nextID += 2
	h := append([]byte(nil), header...)
	st := newStream(s, id, h, s.startWindow())
	s.streams[id] = st
	s.noteStreamAdded()
	// Queued under s.mu so OPEN frames leave in ID order.
	s.queueCtrl(frameHeader{typ: frameOpen, stream: id}, h)
	if st.recv.size > initialStreamWindow {
		s.queueWindow(id, st.recv.limit)
	}
	s.mu.Unlock()
	s.st.streamsOpened.Add(1)
	return st, nil
}

func (s *session) AcceptStream(ctx context.Context) (Stream, error) {
	select {
	case st := <-s.acceptQ:
		return st, nil
	default:
	}
	select {
	case st := <-s.acceptQ:
		return st, nil
	case <-s.closed:
		return nil, fmt.Errorf("accept stream: %w", s.closedErr())
	case <-ctx.Done():
		return nil, fmt.Errorf("accept stream: %w", ctx.Err())
	}
}

// noteStreamAdded marks the session busy when a stream made it so, and
// wakes the keepalive loop, which may sleep an idle session's long wait,
// to judge it by the busy limit from now on (s.mu held).
func (s *session) noteStreamAdded() {
	if len(s.streams) != 1 {
		return
	}
	s.busySince.Store(s.now())
	s.kickKeepalive()
}

// openStreams is how many streams the session carries now, opened by
// either end (streamCounter).
func (s *session) openStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

func (s *session) removeStream(id uint32) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// reserve takes up to n bytes of session send credit, 0 if none.
func (s *session) reserve(n uint64) (uint64, <-chan struct{}) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	avail := s.sendLimit - s.sent
	if avail == 0 {
		return 0, s.sendWake
	}
	n = min(n, avail)
	s.sent += n
	return n, nil
}

// unreserve returns session credit taken by reserve but not used.
func (s *session) unreserve(n uint64) {
	if n == 0 {
		return
	}
	s.fmu.Lock()
	s.sent -= n
	close(s.sendWake)
	s.sendWake = make(chan struct{})
	s.fmu.Unlock()
}

// sessionCredit: how the session window is credited, and what bounds the
// memory of a session.
//
// Data is credited back to the session window as soon as it is in a
// stream's buffer (or discarded), not when the stream's reader takes it.
// Crediting on read let streams whose readers stall pin the session
// window with their unread data: ~150 stalled streams with 256 KiB each,
// or a few whose windows had grown, blocked every other stream of the
// session (README, "Concurrency limits"). A stream's own window bounds
// what it holds unread, so the memory bound moves to the stream windows:
// every stream holds at most its window, 256 KiB unless it grew, and the
// growth of all the session's streams together (a window doubles only
// while its reader keeps up, recvWindow.autotune, and a stream on a warm
// session starts above 256 KiB, startWindow) comes from a budget of
// MaxSessionWindow, returned when the stream ends. A session's receive
// side thus holds at most 256 KiB × its streams + MaxSessionWindow. With
// the budget spent, windows stop growing (a fast stream beside stalled
// ones runs at a smaller window) and nothing waits.

// takeGrowth takes up to n bytes of window growth from the budget.
func (s *session) takeGrowth(n uint64) uint64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	n = min(n, s.growBudget-s.growUsed)
	s.growUsed += n
	return n
}

// releaseGrowth returns a removed stream's growth to the budget.
func (s *session) releaseGrowth(n uint64) {
	if n == 0 {
		return
	}
	s.fmu.Lock()
	s.growUsed -= n
	s.fmu.Unlock()
}

// consumed credits n bytes buffered (or discarded) back to the session
// window (sessionCredit).
func (s *session) consumed(n uint64) {
	if n == 0 {
		return
	}
	s.fmu.Lock()
	l, ok := s.recv.consume(n, time.Now(), s.tuneRTT())
	s.fmu.Unlock()
	if ok {
		s.queueWindow(0, l)
	}
}

// streamWindowGrew keeps the session window at least twice the largest
// stream window, so one fast stream cannot starve the others, and remembers
// the size for new streams.
func (s *session) streamWindowGrew(size uint64) {
	s.mu.Lock()
	if size > s.learned {
		s.learned = size
	}
	s.mu.Unlock()
	s.fmu.Lock()
	l, ok := s.recv.grow(2 * size)
	s.fmu.Unlock()
	if ok {
		s.queueWindow(0, l)
	}
}

// ---- reading ----

func (s *session) readLoop() {
	defer s.wg.Done()
	var hb [frameHeaderLen]byte
	scratch := make([]byte, 4<<10)
	for {
		if _, err := io.ReadFull(s.rd, hb[:]); err != nil {
			s.closeWithError(s.readError(err))
			return
		}
		s.lastRecv.Store(s.now())
		s.st.framesReceived.Add(1)
		h := decodeFrameHeader(hb[:])
		if err := s.handleFrame(h, &scratch); err != nil {
			if !errors.Is(err, ErrProtocol) {
				err = s.readError(err)
			} else {
				// Best effort: tell the peer why before hanging up.
				s.lastWords(err.Error(), 100*time.Millisecond)
			}
			s.closeWithError(err)
			return
		}
	}
}

func (s *session) readError(err error) error {
	s.mu.Lock()
	reason := s.goAway
	s.mu.Unlock()
	if reason != "" {
		return fmt.Errorf("peer closed the session: %s", reason)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read: connection closed by peer: %w", err)
	}
	return fmt.Errorf("read: %w", err)
}

func (s *session) readPayload(n int, scratch *[]byte) ([]byte, error) {
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	b := (*scratch)[:n]
	_, err := io.ReadFull(s.rd, b)
	return b, err
}

// lookup finds the stream for a frame. A nil stream with nil error means the
// stream existed but is gone.
func (s *session) lookup(id uint32) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil {
		return st, nil
	}
	local := (id&1 == 1) == s.client
	if (local && id >= s.nextID) || (!local && id > s.lastPeerID) {
		return nil, fmt.Errorf("%w: frame for stream %d that was never opened", ErrProtocol, id)
	}
	return nil, nil
}

func (s *session) handleFrame(h frameHeader, scratch *[]byte) error {
	if err := h.validate(s.cfg.MaxHeaderSize); err != nil {
		return err
	}
	switch h.typ {
	case frameData:
		return s.handleData(h, scratch)
	case frameOpen:
		return s.handleOpen(h)
	case frameWindow:
		p, err := s.readPayload(8, scratch)
		if err != nil {
			return err
		}
		limit := binary.BigEndian.Uint64(p)
		if h.stream == 0 {
			s.fmu.Lock()
			if limit > s.sendLimit {
				s.sendLimit = limit
				close(s.sendWake)
				s.sendWake = make(chan struct{})
			}
			s.fmu.Unlock()
			return nil
		}
		st, err := s.lookup(h.stream)
		if st != nil {
			st.onWindow(limit)
		}
		return err
	case frameReset:
		p, err := s.readPayload(int(h.length), scratch)
		if err != nil {
			return err
		}
		st, err := s.lookup(h.stream)
		if st != nil {
			s.st.resetsReceived.Add(1)
			st.onReset(string(p))
		}
		return err
	case framePing:
		p, err := s.readPayload(8, scratch)
		if err != nil {
			return err
		}
		if h.flags&flagACK != 0 {
			s.onPong(binary.BigEndian.Uint64(p))
			return nil
		}
		s.queueCtrl(frameHeader{typ: framePing, flags: flagACK}, append([]byte(nil), p...))
		return nil
	case frameGoAway:
		p, err := s.readPayload(int(h.length), scratch)
		if err != nil {
			return err
		}
		reason := string(p)
		if reason == "" {
			reason = "going away"
		}
		s.mu.Lock()
		s.goAway = reason
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("%w: unknown frame type %d", ErrProtocol, uint8(h.typ))
}

func (s *session) handleOpen(h frameHeader) error {
	id := h.stream
	s.mu.Lock()
	if (id&1 == 1) == s.client || id <= s.lastPeerID {
		s.mu.Unlock()
		return fmt.Errorf("%w: OPEN of stream %d: wrong parity or not increasing (last %d)", ErrProtocol, id, s.lastPeerID)
	}
	s.lastPeerID = id
	learned := s.startWindow()
	s.mu.Unlock()
	header := make([]byte, h.length)
	if _, err := io.ReadFull(s.rd, header); err != nil {
		return err
	}
	st := newStream(s, id, header, learned)
	s.mu.Lock()
	refuse := ""
	switch {
	case s.isClosed():
		refuse = "session closing"
	case len(s.streams) >= s.cfg.MaxIncomingStreams:
		refuse = "too many streams"
	default:
		select {
		case s.acceptQ <- st:
			s.streams[id] = st
			s.noteStreamAdded()
		default:
			refuse = "accept backlog full"
		}
	}
	if refuse == "" && st.recv.size > initialStreamWindow {
		s.queueWindow(id, st.recv.limit)
	}
	s.mu.Unlock()
	if refuse != "" {
		s.releaseGrowth(st.granted)
		s.st.streamsRefused.Add(1)
		s.queueReset(id, refuse)
		return nil
	}
	s.st.streamsAccepted.Add(1)
	return nil
}

func (s *session) handleData(h frameHeader, scratch *[]byte) error {
	n := uint64(h.length)
	s.fmu.Lock()
	if s.received+n > s.recv.limit {
		s.fmu.Unlock()
		return fmt.Errorf("%w: session flow control: %d bytes beyond the window", ErrProtocol, s.received+n-s.recv.limit)
	}
	s.received += n
	s.fmu.Unlock()
	st, err := s.lookup(h.stream)
	if err != nil {
		return err
	}
	if st == nil {
		// The stream is gone: drop the bytes, credit the session.
		if _, err := s.readPayload(int(n), scratch); err != nil {
			return err
		}
		s.consumed(n)
		return nil
	}
	return st.onData(h, scratch)
}
