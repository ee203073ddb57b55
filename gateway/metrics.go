package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/fabric"
)

const (
	pointEgress  = 0 // the sending gateway, at an import
	pointIngress = 1 // the receiving gateway, at an export
)

var pointNames = [2]string{"egress", "ingress"}

// metrics are the gateway's counters. They are plain atomics, updated per
// connection (never per packet) and rendered in Prometheus text format.
type metrics struct {
	clientConns      atomic.Uint64
	sessionsAccepted atomic.Uint64
	openFailures     atomic.Uint64
	refused          atomic.Uint64
	warmDials        atomic.Uint64
	coldDials        atomic.Uint64
	streamsOpen      [2]atomic.Int64
	streamsTotal     [2]atomic.Uint64
	denials          [2]atomic.Uint64
	bytesOut         [2]atomic.Uint64 // toward the peer cluster
	bytesIn          [2]atomic.Uint64 // from the peer cluster
	udp              udpMetrics
}

func newMetrics() *metrics { return &metrics{} }

func (m *metrics) denied(point int) { m.denials[point].Add(1) }

func (m *metrics) streamOpened(point int) {
	m.streamsOpen[point].Add(1)
	m.streamsTotal[point].Add(1)
}

// streamClosed records a finished stream; out is what went toward the
// other cluster, in what came from it.
func (m *metrics) streamClosed(point int, out, in int64) {
	m.streamsOpen[point].Add(-1)
	m.bytesOut[point].Add(uint64(out))
	m.bytesIn[point].Add(uint64(in))
}

// writeMetrics renders every counter, the fabric's handshake rejections and
// each peer's RTT.
func (g *Gateway) writeMetrics(w io.Writer) {
	m := g.metrics
	gauge := func(name, help string) { fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name) }
	counter := func(name, help string) { fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name) }

	gauge("strait_streams_open", "Streams open now, by where the gateway sits on them.")
	for p, name := range pointNames {
		fmt.Fprintf(w, "strait_streams_open{point=%q} %d\n", name, m.streamsOpen[p].Load())
	}
	counter("strait_streams_total", "Streams carried since start.")
	for p, name := range pointNames {
		fmt.Fprintf(w, "strait_streams_total{point=%q} %d\n", name, m.streamsTotal[p].Load())
	}
	counter("strait_stream_bytes_total", "Payload bytes of finished streams, toward (out) and from (in) the other cluster.")
	for p, name := range pointNames {
		fmt.Fprintf(w, "strait_stream_bytes_total{point=%q,direction=\"out\"} %d\n", name, m.bytesOut[p].Load())
		fmt.Fprintf(w, "strait_stream_bytes_total{point=%q,direction=\"in\"} %d\n", name, m.bytesIn[p].Load())
	}
	counter("strait_policy_denials_total", "Connections closed because a policy denied them.")
	for p, name := range pointNames {
		fmt.Fprintf(w, "strait_policy_denials_total{point=%q} %d\n", name, m.denials[p].Load())
	}
	counter("strait_streams_refused_total", "Incoming streams refused: unknown export or port, bad header, unreachable target.")
	fmt.Fprintf(w, "strait_streams_refused_total %d\n", m.refused.Load())
	counter("strait_stream_open_failures_total", "Client connections no peer gateway could take.")
	fmt.Fprintf(w, "strait_stream_open_failures_total %d\n", m.openFailures.Load())
	counter("strait_client_connections_total", "Client connections accepted on imports.")
	fmt.Fprintf(w, "strait_client_connections_total %d\n", m.clientConns.Load())
	counter("strait_target_dials_total", "Connections to export targets, warm (preconnected) or cold.")
	fmt.Fprintf(w, "strait_target_dials_total{kind=\"warm\"} %d\n", m.warmDials.Load())
	fmt.Fprintf(w, "strait_target_dials_total{kind=\"cold\"} %d\n", m.coldDials.Load())
	counter("strait_sessions_accepted_total", "Sessions accepted from peer gateways.")
	fmt.Fprintf(w, "strait_sessions_accepted_total %d\n", m.sessionsAccepted.Load())

	m.udp.write(w)

	counter("strait_handshake_failures_total", "TLS handshakes rejected by certificate verification, by reason.")
	rej := g.id.Rejections()
	reasons := make([]fabric.Reason, 0, len(rej))
	for r := range rej {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "strait_handshake_failures_total{reason=%q} %d\n", r, rej[r])
	}

	gauge("strait_peer_rtt_seconds", "Smoothed round-trip time to each peer cluster's gateways, from keepalives.")
	gauge("strait_peer_sessions_live", "Live sessions to each peer cluster.")
	peers := g.peerStatus()
	for _, p := range peers {
		fmt.Fprintf(w, "strait_peer_rtt_seconds{peer=%q} %g\n", p.Cluster, p.RTT.Seconds())
		fmt.Fprintf(w, "strait_peer_sessions_live{peer=%q} %d\n", p.Cluster, len(p.Live))
	}
	gauge("strait_peer_gateway_up", "1 while the table sends flows to the peer gateway, 0 while it is taken out as dead.")
	gauge("strait_peer_gateway_share", "The peer gateway's share of the table's buckets, its inherited ones included.")
	for _, p := range peers {
		for _, r := range p.Gateways {
			up := 0
			if r.Live {
				up = 1
			}
			fmt.Fprintf(w, "strait_peer_gateway_up{peer=%q,gateway=%q} %d\n", p.Cluster, r.Addr, up)
			fmt.Fprintf(w, "strait_peer_gateway_share{peer=%q,gateway=%q} %g\n", p.Cluster, r.Addr, float64(r.Buckets)/float64(max(r.Size, 1)))
		}
	}
	counter("strait_peer_gateway_streams_total", "Streams opened on each peer gateway.")
	counter("strait_peer_gateway_downs_total", "Times each peer gateway was taken out as dead.")
	for _, p := range peers {
		for _, r := range p.Gateways {
			fmt.Fprintf(w, "strait_peer_gateway_streams_total{peer=%q,gateway=%q} %d\n", p.Cluster, r.Addr, r.Streams)
			fmt.Fprintf(w, "strait_peer_gateway_downs_total{peer=%q,gateway=%q} %d\n", p.Cluster, r.Addr, r.Downs)
		}
	}
}

func (g *Gateway) serveMetrics(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Metrics)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		g.writeMetrics(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.spawn(func() { _ = srv.Serve(ln) })
	g.spawn(func() {
		<-ctx.Done()
		_ = srv.Close()
	})
	return nil
}
