package tool

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/lab/topology"
)

func init() { Register("strait", func() Tool { return &straitTool{} }) }

// gatewayPort is where strait gateways listen for each other in the lab.
const gatewayPort = 4443

// straitTool runs one strait gateway on the first gateway node of the
// server's cluster and one on the client's: the server's gateway exports
// every workload, the client's imports each on its own node address with
// the workload's port, so the client dials <client gateway>:<port>.
type straitTool struct{ procs processes }

func (*straitTool) Name() string { return "strait" }

func (t *straitTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	exportGW, importGW, err := gatewayPair(env, "strait")
	if err != nil {
		return nil, err
	}
	fabricDir := filepath.Join(env.Dir, "fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fabricDir, "--clusterset", env.Lab.Plan.Name, "--force"},
		{"fabric", "issue", env.Server.Cluster, "--dir", fabricDir},
		{"fabric", "issue", env.Client.Cluster, "--dir", fabricDir},
	} {
		if out, err := exec.CommandContext(ctx, env.Binary, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("strait %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	exportAddr := net.JoinHostPort(exportGW.Addr.String(), strconv.Itoa(gatewayPort))
	importAddr := net.JoinHostPort(importGW.Addr.String(), strconv.Itoa(gatewayPort))

	var exportRes, importRes strings.Builder
	writePeer(&exportRes, env.Client.Cluster, importAddr)
	writePeer(&importRes, env.Server.Cluster, exportAddr)
	targets := map[string]string{}
	for _, s := range env.Services {
		fmt.Fprintf(&exportRes, `---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: %s, namespace: default}
spec: {target: "%s"}
`, s.Name, net.JoinHostPort(env.Server.Addr.String(), strconv.Itoa(s.Port)))
		fmt.Fprintf(&importRes, `---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: %s, namespace: default}
spec:
  type: ClusterSetIP
  ips: [%s]
  ports: [{name: http, protocol: TCP, port: %d}]
  clusters: [{cluster: %s}]
`, s.Name, importGW.Addr, s.Port, env.Server.Cluster)
		targets[s.Name] = net.JoinHostPort(importGW.Addr.String(), strconv.Itoa(s.Port))
	}
	// The lab measures the data path; access control is exercised by the
	// gateway's own tests. Both ends still evaluate this policy per stream.
	const allowAll = `---
apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: allow-all}
spec: {priority: 1000, action: allow}
`
	exportRes.WriteString(allowAll)
	importRes.WriteString(allowAll)

	sockets := map[string]string{}
	for _, gw := range []struct {
		node      *topology.PlanNode
		resources string
		dns       bool
	}{{exportGW, exportRes.String(), false}, {importGW, importRes.String(), true}} {
		name := gw.node.Cluster
		resFile := filepath.Join(env.Dir, name+"-resources.yaml")
		if err := os.WriteFile(resFile, []byte(gw.resources), 0o644); err != nil {
			return nil, err
		}
		socket := filepath.Join(env.Dir, name+".sock")
		sockets[name] = socket
		cfg := fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nresources: [%s]\n",
			name, fabricDir, net.JoinHostPort(gw.node.Addr.String(), strconv.Itoa(gatewayPort)), socket,
			filepath.Join(env.Dir, name+"-state.json"), resFile)
		if gw.dns {
			cfg += fmt.Sprintf("dns: %s\n", net.JoinHostPort(gw.node.Addr.String(), "53"))
		}
		cfgFile := filepath.Join(env.Dir, name+"-gateway.yaml")
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		if err := t.procs.start(ctx, env, gw.node, filepath.Join(env.Dir, name+"-gateway.log"), env.Binary, "gateway", "--config", cfgFile); err != nil {
			return nil, err
		}
	}
	if err := waitReady(ctx, sockets[env.Client.Cluster], env.Server.Cluster, len(env.Services)); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, env.Dir)
	}
	return targets, nil
}

func writePeer(b *strings.Builder, cluster, addr string) {
	fmt.Fprintf(b, `apiVersion: strait.dev/v1alpha1
kind: Peer
metadata: {name: %s}
spec: {gateways: ["%s"]}
`, cluster, addr)
}

// waitReady waits until the importing gateway has a live session to the
// exporting cluster and listens on every import.
func waitReady(ctx context.Context, socket, peer string, imports int) error {
	client := gateway.NewAdminClient(socket)
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		st, err := client.Status()
		switch {
		case err != nil:
			last = err
		case len(st.Imports) < imports:
			last = fmt.Errorf("%d of %d imports listening", len(st.Imports), imports)
		default:
			for _, p := range st.Peers {
				if p.Cluster == peer && len(p.Live) > 0 {
					return nil
				}
			}
			last = fmt.Errorf("no live session to cluster %s", peer)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("gateways not ready after 20s: %w", last)
}

func (t *straitTool) Teardown(context.Context) error { return t.procs.stop() }

func (*straitTool) Version(ctx context.Context) string {
	exe, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	out, err := exec.CommandContext(ctx, exe, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
