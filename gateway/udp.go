package gateway

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strait-net/strait/tunnel"
)

// UDP services. A client's datagrams to an import port with protocol UDP
// are a flow, keyed by the client's address and port and the import's
// address and port. The importing gateway carries each flow as one
// datagram stream (tunnel/datagram.go) on a warm session; the exporting
// gateway sends the flow's datagrams to the port's target from a connected
// UDP socket of its own and carries the replies back, and the importing
// gateway answers the client from the import address it sent to. Policies
// are checked once per flow at both ends, as for a TCP connection.
//
// Memory is bounded per flow: datagrams waiting for the stream sit in a
// queue of at most UDPConfig.QueueBytes (what does not fit is dropped and
// counted), the stream's flow control bounds what is in flight, and
// MaxFlows bounds the flows. A flow ends after IdleTimeout without a
// datagram in either direction, at either gateway.

// UDPConfig bounds the UDP flows a gateway carries. The zero value is
// usable: every zero field takes its default.
type UDPConfig struct {
	// IdleTimeout ends a flow after this long without a datagram in
	// either direction (0: 30s, the kernel's conntrack timeout for UDP
	// without replies, which is what a client sees without strait).
	IdleTimeout time.Duration `yaml:"idle-timeout"`
	// QueueBytes bounds the datagrams of one flow waiting for its stream,
	// counting 2 bytes of framing each (0: 256 KiB; at least 65537, so the
	// largest datagram fits). A datagram that does not fit is dropped and
	// counted (reason queue_full): like a full socket buffer, never a
	// stall of the other flows.
	QueueBytes int `yaml:"queue-bytes"`
	// MaxFlows bounds the flows open at once where this gateway imports,
	// and separately where it exports (0: 8192). A datagram that would
	// open a flow past it is dropped (reason flow_limit) at the importing
	// gateway; a stream past it is refused at the exporting one.
	MaxFlows int `yaml:"max-flows"`
	// ImportRate bounds the datagrams per second the gateway reads from
	// one import address (IP and UDP port), all its clients together
	// (0: 200 000, 2.2 Gbit/s of 1400-byte datagrams, above what one
	// import carries in the stream mode; 100 to 10 000 000). Past it the gateway leaves the
	// address's socket unread until its next window (udpBudget), so that
	// a flood at one import costs the gateway no more than this rate's
	// work however fast it comes, and the other imports keep the rest;
	// what the kernel drops at the full socket meanwhile is counted
	// (reason import_rate). Datagrams under the rate wait at most a
	// window (10 ms) when they come in bursts past it.
	ImportRate int `yaml:"import-rate"`
}

// Defaults of UDPConfig.
const (
	DefaultUDPIdleTimeout = 30 * time.Second
	DefaultUDPQueueBytes  = 256 << 10
	DefaultUDPMaxFlows    = 8192
	DefaultUDPImportRate  = 200_000
	minUDPImportRate      = 100
	maxUDPImportRate      = 10_000_000
	minUDPQueueBytes      = tunnel.MaxDatagram + 2
	maxUDPQueueBytes      = 64 << 20
	maxUDPFlows           = 1 << 20
)

// Validate names the first bad field.
func (c UDPConfig) Validate() error {
	switch {
	case c.IdleTimeout < 0:
		return fmt.Errorf("idle-timeout %v: must be 0 (default %v) or positive", c.IdleTimeout, DefaultUDPIdleTimeout)
	case c.IdleTimeout != 0 && c.IdleTimeout < 100*time.Millisecond:
		return fmt.Errorf("idle-timeout %v: must be at least 100ms", c.IdleTimeout)
	case c.QueueBytes < 0 || (c.QueueBytes != 0 && c.QueueBytes < minUDPQueueBytes) || c.QueueBytes > maxUDPQueueBytes:
		return fmt.Errorf("queue-bytes %d: must be 0 (default %d) or %d to %d", c.QueueBytes, DefaultUDPQueueBytes, minUDPQueueBytes, maxUDPQueueBytes)
	case c.MaxFlows < 0 || c.MaxFlows > maxUDPFlows:
		return fmt.Errorf("max-flows %d: must be 0 (default %d) to %d", c.MaxFlows, DefaultUDPMaxFlows, maxUDPFlows)
	case c.ImportRate < 0 || (c.ImportRate != 0 && c.ImportRate < minUDPImportRate) || c.ImportRate > maxUDPImportRate:
		return fmt.Errorf("import-rate %d: must be 0 (default %d) or %d to %d datagrams per second", c.ImportRate, DefaultUDPImportRate, minUDPImportRate, maxUDPImportRate)
	}
	return nil
}

func (c UDPConfig) idleTimeout() time.Duration {
	if c.IdleTimeout == 0 {
		return DefaultUDPIdleTimeout
	}
	return c.IdleTimeout
}

func (c UDPConfig) queueBytes() int {
	if c.QueueBytes == 0 {
		return DefaultUDPQueueBytes
	}
	return c.QueueBytes
}

func (c UDPConfig) importRate() int {
	if c.ImportRate == 0 {
		return DefaultUDPImportRate
	}
	return c.ImportRate
}

func (c UDPConfig) maxFlows() int64 {
	if c.MaxFlows == 0 {
		return DefaultUDPMaxFlows
	}
	return int64(c.MaxFlows)
}

// Reasons a datagram was dropped, the label of strait_udp_drops_total.
const (
	dropQueueFull   = iota // the flow's queue toward its stream was full
	dropFlowLimit          // no flow could be opened: MaxFlows reached
	dropDenied             // the flow is denied by policy (egress)
	dropUnreachable        // no session to any exporting cluster
	dropRefused            // the exporting gateway refused or ended the flow
	dropTarget             // the target refused it (ICMP port unreachable)
	dropSend               // sending to the client or target failed otherwise
	dropImportRate         // the import address was past UDPConfig.ImportRate: dropped by the kernel at its unread socket
	numDropReasons
)

var dropNames = [numDropReasons]string{"queue_full", "flow_limit", "denied", "unreachable", "refused", "target_unreachable", "send_failed", "import_rate"}

// udpMetrics are the UDP counters, per point as the TCP ones. Datagrams
// are counted one by one with atomics (no logs per datagram).
type udpMetrics struct {
	flowsOpen  [2]atomic.Int64
	flowsTotal [2]atomic.Uint64
	dgramsOut  [2]atomic.Uint64 // toward the peer cluster
	dgramsIn   [2]atomic.Uint64 // from the peer cluster
	bytesOut   [2]atomic.Uint64
	bytesIn    [2]atomic.Uint64
	drops      [2][numDropReasons]atomic.Uint64
}

func (m *udpMetrics) out(point, n int) {
	m.dgramsOut[point].Add(1)
	m.bytesOut[point].Add(uint64(n))
}

func (m *udpMetrics) in(point, n int) {
	m.dgramsIn[point].Add(1)
	m.bytesIn[point].Add(uint64(n))
}

// carried is the datagrams carried both ways at both points so far.
func (m *udpMetrics) carried() uint64 {
	var n uint64
	for p := range m.dgramsOut {
		n += m.dgramsOut[p].Load() + m.dgramsIn[p].Load()
	}
	return n
}

func (m *udpMetrics) drop(point, reason int) { m.drops[point][reason].Add(1) }

// open takes one of max flow slots at point; false when none is left.
func (m *udpMetrics) open(point int, max int64) bool {
	if m.flowsOpen[point].Add(1) > max {
		m.flowsOpen[point].Add(-1)
		return false
	}
	m.flowsTotal[point].Add(1)
	return true
}

func (m *udpMetrics) close(point int) { m.flowsOpen[point].Add(-1) }

var (
	descUDPFlowsOpen  = prometheus.NewDesc("strait_udp_flows_open", "UDP flows open now, by where the gateway sits on them.", []string{"point"}, nil)
	descUDPFlowsTotal = prometheus.NewDesc("strait_udp_flows_total", "UDP flows opened since start.", []string{"point"}, nil)
	descUDPDatagrams  = prometheus.NewDesc("strait_udp_datagrams_total", "UDP datagrams carried, toward (out) and from (in) the other cluster.", []string{"point", "direction"}, nil)
	descUDPBytes      = prometheus.NewDesc("strait_udp_bytes_total", "UDP payload bytes carried, toward (out) and from (in) the other cluster.", []string{"point", "direction"}, nil)
	descUDPDrops      = prometheus.NewDesc("strait_udp_drops_total", "UDP datagrams dropped, by reason.", []string{"point", "reason"}, nil)
)

// Describe and Collect make the counters a prometheus.Collector: they stay
// plain atomics on the per-datagram path and are read only at scrape time.
func (m *udpMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUDPFlowsOpen, descUDPFlowsTotal, descUDPDatagrams, descUDPBytes, descUDPDrops} {
		ch <- d
	}
}

func (m *udpMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for p, name := range pointNames {
		ch <- prometheus.MustNewConstMetric(descUDPFlowsOpen, prometheus.GaugeValue, float64(m.flowsOpen[p].Load()), name)
		counter(descUDPFlowsTotal, m.flowsTotal[p].Load(), name)
		counter(descUDPDatagrams, m.dgramsOut[p].Load(), name, "out")
		counter(descUDPDatagrams, m.dgramsIn[p].Load(), name, "in")
		counter(descUDPBytes, m.bytesOut[p].Load(), name, "out")
		counter(descUDPBytes, m.bytesIn[p].Load(), name, "in")
		for r, reason := range dropNames {
			counter(descUDPDrops, m.drops[p][r].Load(), name, reason)
		}
	}
}

// datagramQueue holds one flow's datagrams on their way to its stream, as
// records ready to write, up to limit bytes. A writer takes everything
// queued at once, so a burst of small datagrams costs one stream Write.
type datagramQueue struct {
	mu     sync.Mutex
	buf    []byte // queued records
	spare  []byte // the writer's previous batch, for reuse
	limit  int
	notify chan struct{}
}

// maxSpareQueue is the largest batch buffer kept for reuse: a burst's
// buffer is returned to the heap instead of held by an idle flow.
const maxSpareQueue = 64 << 10

func newDatagramQueue(limit int) *datagramQueue {
	return &datagramQueue{limit: limit, notify: make(chan struct{}, 1)}
}

// push queues p, or returns false when it does not fit.
func (q *datagramQueue) push(p []byte) bool {
	q.mu.Lock()
	if len(q.buf)+tunnel.DatagramRecordLen(p) > q.limit {
		q.mu.Unlock()
		return false
	}
	wasEmpty := len(q.buf) == 0
	q.buf, _ = tunnel.AppendDatagram(q.buf, p) // p came from a socket: at most MaxDatagram
	q.mu.Unlock()
	if wasEmpty {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns every queued record; hand the slice back with recycle.
func (q *datagramQueue) take() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.buf
	q.buf, q.spare = q.spare[:0], nil
	return b
}

func (q *datagramQueue) recycle(b []byte) {
	if cap(b) > maxSpareQueue {
		return
	}
	q.mu.Lock()
	q.spare = b[:0]
	q.mu.Unlock()
}

// drain writes what is queued to st until done is closed or a write
// fails, which it returns.
func (q *datagramQueue) drain(st tunnel.Stream, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return nil
		case <-q.notify:
		}
		b := q.take()
		if len(b) == 0 {
			q.recycle(b)
			continue
		}
		_, err := st.Write(b)
		q.recycle(b)
		if err != nil {
			return err
		}
	}
}

// udpActivity is when a flow last carried a datagram, read by the sweeper.
type udpActivity struct{ last atomic.Int64 }

func (a *udpActivity) touch(now int64) { a.last.Store(now) }

func (a *udpActivity) idleSince(now int64) time.Duration {
	return time.Duration(now - a.last.Load())
}

// sweepInterval is how often idle flows are looked for: an eighth of the
// timeout, so a flow ends at most an eighth late, within 10ms..1s.
func (c UDPConfig) sweepInterval() time.Duration {
	return min(max(c.idleTimeout()/8, 10*time.Millisecond), time.Second)
}
