package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func init() { Register("nebula", func() Tool { return &nebulaTool{} }) }

const (
	nebulaPort = 4242
	// nebulaMTU fits nebula's 60 bytes of IPv4, UDP, nebula header and
	// AEAD tag into the lab's 1500-byte links (nebula's default is 1300).
	nebulaMTU = 1440
	// nebulaBuffer is the UDP socket buffer nebula asks for (it forces it
	// past rmem_max); with the default, its receive queue overflows under
	// bulk transfer and TCP through it collapses into retransmissions.
	nebulaBuffer = 4 << 20
)

// nebulaTool runs Slack's nebula, the overlay of seed 001, on the two
// clusters' gateway nodes: the server cluster's gateway is also the
// lighthouse, certificates come from nebula-cert per lab, and each
// gateway's certificate names the endpoint behind it as a subnet it may
// route for (nebula's unsafe_routes), so the client and the server keep
// their own addresses and route as with direct.
type nebulaTool struct {
	procs   processes
	changes changes
}

func (*nebulaTool) Name() string { return "nebula" }

func (t *nebulaTool) Setup(ctx context.Context, env Env) (map[string]string, error) {
	serverGW, clientGW, err := gatewayPair(env, "nebula")
	if err != nil {
		return nil, err
	}
	pki := filepath.Join(env.Dir, "nebula-pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	ca := filepath.Join(pki, "ca")
	if err := t.changes.run(ctx, nil, "nebula-cert", "ca", "-name", "strait lab "+env.Lab.Plan.Name,
		"-duration", "24h", "-out-crt", ca+".crt", "-out-key", ca+".key"); err != nil {
		return nil, err
	}
	type end struct {
		gw, behind *planNode
		overlay    string
		ifname     string
	}
	ends := []*end{
		{gw: serverGW, behind: env.Server, overlay: "192.168.100.1"}, // the lighthouse
		{gw: clientGW, behind: env.Client, overlay: "192.168.100.2"},
	}
	lighthouse := ends[0]
	for i, e := range ends {
		peer := ends[1-i]
		e.ifname = deviceName("nb", e.gw.Netns)
		base := filepath.Join(pki, e.gw.Cluster)
		if err := t.changes.run(ctx, nil, "nebula-cert", "sign", "-ca-crt", ca+".crt", "-ca-key", ca+".key",
			"-name", e.gw.ID, "-ip", e.overlay+"/24", "-subnets", e.behind.Addr.String()+"/32",
			"-out-crt", base+".crt", "-out-key", base+".key"); err != nil {
			return nil, err
		}
		var lh string
		if e == lighthouse {
			lh = "  am_lighthouse: true\n"
		} else {
			lh = fmt.Sprintf("  am_lighthouse: false\n  interval: 60\n  hosts: [%q]\n", lighthouse.overlay)
		}
		cfg := fmt.Sprintf(`pki: {ca: %q, cert: %q, key: %q}
static_host_map:
  %q: ["%s:%d"]
lighthouse:
%slisten:
  host: 0.0.0.0
  port: %d
  read_buffer: %d
  write_buffer: %d
punchy: {punch: false}
relay: {am_relay: false, use_relays: false}
tun:
  dev: %s
  mtu: %d
  tx_queue: 1000
  unsafe_routes:
    - {route: %s/32, via: %s}
logging: {level: info, format: text}
firewall:
  outbound: [{port: any, proto: any, host: any}]
  inbound: [{port: any, proto: any, host: any}]
`, ca+".crt", base+".crt", base+".key", lighthouse.overlay, lighthouse.gw.Addr, nebulaPort, lh,
			nebulaPort, nebulaBuffer, nebulaBuffer, e.ifname, nebulaMTU, peer.behind.Addr, peer.overlay)
		cfgFile := filepath.Join(env.Dir, e.gw.Cluster+"-nebula.yml")
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		// nebula installs the unsafe route itself and fails if the lab's
		// route to that address is still there; revert puts it back after
		// nebula has removed its own.
		prefix := peer.behind.Addr.String() + "/32"
		out, err := exec.CommandContext(ctx, "ip", "-n", e.gw.Netns, "route", "show", "exact", prefix).Output()
		if err != nil {
			return nil, fmt.Errorf("ip -n %s route show %s: %w", e.gw.Netns, prefix, err)
		}
		if saved := strings.Fields(string(out)); len(saved) > 1 {
			restore := append([]string{"ip", "-n", e.gw.Netns, "route", "replace", prefix}, saved[1:]...)
			if err := t.changes.run(ctx, restore, "ip", "-n", e.gw.Netns, "route", "del", prefix); err != nil {
				return nil, err
			}
		}
		logFile := filepath.Join(env.Dir, e.gw.Cluster+"-nebula.log")
		if err := t.procs.start(ctx, env, e.gw, logFile, "nebula", "-config", cfgFile); err != nil {
			return nil, err
		}
		if err := waitLink(ctx, e.gw, e.ifname, 5*time.Second); err != nil {
			return nil, fmt.Errorf("nebula: %w (see %s)", err, logFile)
		}
		if err := t.changes.clampMSS(ctx, e.gw, "nebula", e.ifname); err != nil {
			return nil, err
		}
	}
	if err := probeThrough(ctx, env, clientGW, ends[1].ifname); err != nil {
		return nil, fmt.Errorf("nebula health check: %w", err)
	}
	return serverTargets(env), nil
}

// Teardown stops nebula, which removes its device and routes, then puts
// the lab's routes back.
func (t *nebulaTool) Teardown(ctx context.Context) error {
	return errors.Join(t.procs.stop(), t.changes.revert(ctx))
}

func (*nebulaTool) Version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "nebula", "-version").CombinedOutput()
	if err != nil {
		return "nebula (version unknown)"
	}
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Version:"))
	return fmt.Sprintf("nebula %s (Debian; MTU %d, %d MiB UDP buffers, 1 routine)", v, nebulaMTU, nebulaBuffer>>20)
}

// Carries: nebula's overlay carries any IP traffic.
func (*nebulaTool) Carries(Protocol) bool { return true }

// Processes are the nebula daemons.
func (t *nebulaTool) Processes() []Process { return t.procs.list() }
