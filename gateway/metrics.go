package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strait-net/strait/tunnel"
)

const (
	pointEgress  = 0 // the sending gateway, at an import
	pointIngress = 1 // the receiving gateway, at an export
)

var pointNames = [2]string{"egress", "ingress"}

// metrics are the gateway's Prometheus metrics, in a registry of its own
// (tests run several gateways in one process), with the process and Go
// runtime collectors: RSS, file descriptors, goroutines. Counters are
// updated per connection or stream, never per packet; the children of
// labeled vectors are resolved once here, not on every update.
type metrics struct {
	reg *prometheus.Registry

	clientConns      prometheus.Counter
	sessionsAccepted prometheus.Counter
	openFailures     prometheus.Counter
	refused          prometheus.Counter
	unknownImport    prometheus.Counter
	warmDials        prometheus.Counter
	coldDials        prometheus.Counter
	streamsOpen      [2]prometheus.Gauge
	streamsTotal     [2]prometheus.Counter
	denials          [2]prometheus.Counter
	bytesOut         [2]prometheus.Counter // toward the peer cluster
	bytesIn          [2]prometheus.Counter // from the peer cluster
	// limitRefused counts connections refused because the gateway carried
	// max-streams already (limit.go), by point.
	limitRefused [2]prometheus.Counter
	maxStreams   prometheus.Gauge

	// openTime is how long opening a stream on a peer session took at the
	// importing gateway: a counter of streams hides a slow tail.
	openTime prometheus.Histogram
	// firstByte is, at the exporting gateway, the time from a stream's
	// arrival to the first byte of its target's answer: the export's own
	// response time plus the target connection, seen where it happens.
	firstByte prometheus.Histogram
	// rtt holds every keepalive round-trip sample per peer cluster; the
	// gauge strait_peer_rtt_seconds is only the smoothed value.
	rtt *prometheus.HistogramVec

	udp udpMetrics

	// Memory returned to the system after bursts (reclaim.go).
	reclaims, reclaimedBytes, reclaimCPU prometheus.Counter

	// packetRefusals counts the packet mode refused for a peer (once per
	// reason; packetmode.go).
	packetRefusals *prometheus.CounterVec
	// packetUnsent is the Workload addresses left out of the last hello
	// to a peer (packetctl.go, helloSources).
	packetUnsent *prometheus.GaugeVec
}

// latencyBuckets span 10 µs to about 2.6 s by factors of 2: a stream
// opens in microseconds on a warm session, a WAN round trip takes
// milliseconds, and a stalled host shows up at the top.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2, 19)

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.clientConns = counter("strait_client_connections_total", "Client connections accepted on imports.")
	m.sessionsAccepted = counter("strait_sessions_accepted_total", "Sessions accepted from peer gateways.")
	m.openFailures = counter("strait_stream_open_failures_total", "Client connections no peer gateway could take.")
	m.refused = counter("strait_streams_refused_total", "Incoming streams refused: unknown export or port, bad header, unreachable target.")
	m.unknownImport = counter("strait_import_unknown_total", "Connections steered to the gateway for an address:port no import holds any more (reset).")
	dials := counterVec("strait_target_dials_total", "Connections to export targets, warm (preconnected) or cold.", "kind")
	m.warmDials, m.coldDials = dials.WithLabelValues("warm"), dials.WithLabelValues("cold")
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "strait_streams_open", Help: "Streams open now, by where the gateway sits on them."}, []string{"point"})
	m.reg.MustRegister(open)
	total := counterVec("strait_streams_total", "Streams carried since start.", "point")
	bytes := counterVec("strait_stream_bytes_total", "Payload bytes of finished streams, toward (out) and from (in) the other cluster.", "point", "direction")
	denials := counterVec("strait_policy_denials_total", "Connections closed because a policy denied them.", "point")
	refused := counterVec("strait_connections_refused_total", "Connections refused by a limit of the gateway, by point and reason (max-streams: the gateway carried max-streams connections).", "point", "reason")
	m.maxStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "strait_max_streams", Help: "The configured max-streams: connections the gateway carries at once."})
	m.reg.MustRegister(m.maxStreams)
	for p, name := range pointNames {
		m.limitRefused[p] = refused.WithLabelValues(name, "max-streams")
		m.streamsOpen[p] = open.WithLabelValues(name)
		m.streamsTotal[p] = total.WithLabelValues(name)
		m.bytesOut[p] = bytes.WithLabelValues(name, "out")
		m.bytesIn[p] = bytes.WithLabelValues(name, "in")
		m.denials[p] = denials.WithLabelValues(name)
	}
	m.reclaims = counter("strait_memory_reclaims_total", "Times the gateway returned free memory to the system after a burst of connections, imports or UDP datagrams ended (README, Concurrency limits).")
	m.reclaimedBytes = counter("strait_memory_reclaimed_bytes_total", "Heap bytes those reclaims returned to the system.")
	m.reclaimCPU = counter("strait_memory_reclaim_cpu_seconds_total", "Process CPU time spent in those reclaims (two collections and a scavenge each).")
	m.packetRefusals = counterVec("strait_packet_refusals_total", "Times the packet mode was refused for a peer (the stream mode carries it): each reason counted once, see the log and status.", "peer")
	m.packetUnsent = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "strait_packet_workloads_unsent",
		Help: "Workload addresses left out of the last packet-mode hello to a peer (past its bounds): the peer's ingress policy sees them as the configured source holding them (docs/packet.md, Workloads)."}, []string{"peer"})
	m.reg.MustRegister(m.packetUnsent)
	m.openTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strait_stream_open_seconds",
		Help: "Time to open a stream on a peer gateway's session, at the importing gateway.", Buckets: latencyBuckets})
	m.firstByte = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strait_target_first_byte_seconds",
		Help: "Time from a stream's arrival at the exporting gateway to the first byte of its target's answer.", Buckets: latencyBuckets})
	m.rtt = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strait_peer_rtt_sample_seconds",
		Help: "Keepalive round-trip samples to each peer cluster's gateways (TLS transport).", Buckets: latencyBuckets}, []string{"peer"})
	m.reg.MustRegister(m.openTime, m.firstByte, m.rtt, &m.udp,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}

func (m *metrics) reclaimed(r reclaimed) {
	m.reclaims.Inc()
	m.reclaimedBytes.Add(float64(r.released))
	m.reclaimCPU.Add(r.cpu.Seconds())
}

func (m *metrics) denied(point int) { m.denials[point].Inc() }

func (m *metrics) streamOpened(point int) {
	m.streamsOpen[point].Inc()
	m.streamsTotal[point].Inc()
}

// streamClosed records a finished stream; out is what went toward the
// other cluster, in what came from it.
func (m *metrics) streamClosed(point int, out, in int64) {
	m.streamsOpen[point].Dec()
	m.bytesOut[point].Add(float64(out))
	m.bytesIn[point].Add(float64(in))
}

// stateCollector reports what the gateway's fabric and peer pools hold
// at scrape time: handshake rejections and each peer's sessions, RTT and
// gateways.
type stateCollector struct{ g *Gateway }

var (
	descHandshake   = prometheus.NewDesc("strait_handshake_failures_total", "TLS handshakes rejected by certificate verification, by reason.", []string{"reason"}, nil)
	descRTT         = prometheus.NewDesc("strait_peer_rtt_seconds", "Smoothed round-trip time to each peer cluster's gateways, from keepalives.", []string{"peer"}, nil)
	descLive        = prometheus.NewDesc("strait_peer_sessions_live", "Live sessions to each peer cluster.", []string{"peer"}, nil)
	descProbe       = prometheus.NewDesc("strait_peer_probe_interval_seconds", "How often the sessions' pool probes each peer cluster's gateways: probe-interval, or slower while the packet mode's prober judges them.", []string{"peer"}, nil)
	descUp          = prometheus.NewDesc("strait_peer_gateway_up", "1 while the table sends flows to the peer gateway, 0 while it is taken out as dead.", []string{"peer", "gateway"}, nil)
	descShare       = prometheus.NewDesc("strait_peer_gateway_share", "The peer gateway's share of the table's buckets, its inherited ones included.", []string{"peer", "gateway"}, nil)
	descGwStreams   = prometheus.NewDesc("strait_peer_gateway_streams_total", "Streams opened on each peer gateway.", []string{"peer", "gateway"}, nil)
	descDowns       = prometheus.NewDesc("strait_peer_gateway_downs_total", "Times each peer gateway was taken out as dead.", []string{"peer", "gateway"}, nil)
	descCarried     = prometheus.NewDesc("strait_connections_carried", "TCP connections the gateway carries now, client and target ones together: what max-streams bounds.", nil, nil)
	descLANCCLosses = prometheus.NewDesc("strait_lan_congestion_losses_total", "Losses strait's congestion control answered on the LAN sockets of this process (clients' connections to imports, connections to export targets), by what it took them for, as strait_wan_congestion_losses_total. Absent where the LAN sockets run another algorithm (docs/congestion.md).", []string{"kind"}, nil)
	descCCLosses    = prometheus.NewDesc("strait_wan_congestion_losses_total", "Losses strait's congestion control answered on the WAN sessions of this process, one per recovery episode, by what it took them for: random (no queue behind the loss: the window lost an eighth) or queue (30 %). Absent where the WAN sockets run another algorithm (docs/congestion.md).", []string{"kind"}, nil)
	descImports     = prometheus.NewDesc("strait_imports", "Import addresses served, by how the gateway receives their connections (steer or listeners).", []string{"intercept"}, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHandshake, descRTT, descLive, descProbe, descUp, descShare, descGwStreams, descDowns, descImports, descCarried, descCCLosses} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	for r, n := range g.id.Rejections() {
		ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.CounterValue, float64(n), string(r))
	}
	for _, p := range g.peerStatus() {
		ch <- prometheus.MustNewConstMetric(descRTT, prometheus.GaugeValue, p.RTT.Seconds(), p.Cluster)
		ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(len(p.Live)), p.Cluster)
		ch <- prometheus.MustNewConstMetric(descProbe, prometheus.GaugeValue, p.ProbeInterval.Seconds(), p.Cluster)
		for _, r := range p.Gateways {
			up := 0.0
			if r.Live {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, p.Cluster, r.Addr)
			ch <- prometheus.MustNewConstMetric(descShare, prometheus.GaugeValue, float64(r.Buckets)/float64(max(r.Size, 1)), p.Cluster, r.Addr)
			ch <- prometheus.MustNewConstMetric(descGwStreams, prometheus.CounterValue, float64(r.Streams), p.Cluster, r.Addr)
			ch <- prometheus.MustNewConstMetric(descDowns, prometheus.CounterValue, float64(r.Downs), p.Cluster, r.Addr)
		}
	}
	g.mu.Lock()
	steered := 0
	for _, l := range g.listeners {
		if l.steered != nil {
			steered++
		}
	}
	n := len(g.listeners)
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descImports, prometheus.GaugeValue, float64(steered), InterceptSteer)
	ch <- prometheus.MustNewConstMetric(descImports, prometheus.GaugeValue, float64(n-steered), InterceptListeners)
	ch <- prometheus.MustNewConstMetric(descCarried, prometheus.GaugeValue, float64(g.limit.active.Load()))
	if l, ok := tunnel.OwnCongestionLosses(); ok {
		ch <- prometheus.MustNewConstMetric(descCCLosses, prometheus.CounterValue, float64(l.Random), "random")
		ch <- prometheus.MustNewConstMetric(descCCLosses, prometheus.CounterValue, float64(l.Queue), "queue")
	}
	if g.lanOwn != nil {
		if l, err := g.lanOwn.Losses(); err == nil {
			ch <- prometheus.MustNewConstMetric(descLANCCLosses, prometheus.CounterValue, float64(l.Random), "random")
			ch <- prometheus.MustNewConstMetric(descLANCCLosses, prometheus.CounterValue, float64(l.Queue), "queue")
		}
	}
}

// rttObserver returns the function the peer's transport calls with each
// keepalive round-trip sample.
func (m *metrics) rttObserver(peer string) func(time.Duration) {
	h := m.rtt.WithLabelValues(peer)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

func (g *Gateway) metricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{g}})
}

// slogPrinter hands the library's collection errors to the gateway's log.
type slogPrinter struct{ g *Gateway }

func (p slogPrinter) Println(v ...any) { p.g.log.Warn("metrics", "err", fmt.Sprint(v...)) }

func (g *Gateway) serveMetrics(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Metrics)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.metricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.spawn(func() { _ = srv.Serve(ln) })
	g.spawn(func() {
		<-ctx.Done()
		_ = srv.Close()
	})
	return nil
}
