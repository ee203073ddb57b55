package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/packet"
)

// TestCutOffGatewayRefusesHealth: an importing gateway whose uplink dies
// refuses the health probes of its cluster's side — its process's health:
// responder, and in the packet mode its programs on the LAN — so that what
// spreads the clients over the gateways takes it out, and answers them
// again once its uplink is back (docs/failover.md, "A gateway cut off from
// its peers"). Its process and its programs live on throughout: only the
// peers' silence tells it.
func TestCutOffGatewayRefusesHealth(t *testing.T) {
	for _, mode := range []string{gateway.DataPlanePacket, gateway.DataPlaneStream} {
		t.Run(mode, func(t *testing.T) {
			e := setupPacket(t, mode, mode, false)
			// a's process answers health probes on its LAN address too.
			const healthPort = 4444
			f, err := os.OpenFile(e.a.config, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("health: 10.1.0.1:4444\n"); err != nil {
				t.Fatal(err)
			}
			f.Close()
			e.a.restart(t)
			e.a.waitLive(t, "b", 1)
			ports := []int{healthPort}
			if mode == gateway.DataPlanePacket {
				dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return d.Active }, "packet mode on a")
				e.a.waitMetric(t, packetAnswers1, func(v float64) bool { return v > 0 }, "b's programs answer a's probes")
				ports = append(ports, packet.DefaultProbePort)
			}
			for _, p := range ports {
				e.healthProbeAt(t, "10.1.0.1", p, "ok")
			}
			testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "down")
			for _, p := range ports {
				e.healthProbeAt(t, "10.1.0.1", p, "refused")
			}
			// Up again, its own prefix's route comes back with it.
			testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "up")
			for _, p := range ports {
				e.healthProbeAt(t, "10.1.0.1", p, "ok")
			}
			e.curl(t, "after the uplink came back")
			if mode != gateway.DataPlaneStream {
				return
			}
			// A gateway with no peer at all has nothing to be cut off
			// from: it answers.
			lone := &gw{t: t, cluster: "a", netns: e.ca, addr: "10.1.0.2",
				socket: filepath.Join(tmpDir, "lone.sock"), config: filepath.Join(tmpDir, "lone-gateway.yaml")}
			cfg := fmt.Sprintf("cluster: a\nidentity: {dir: %s}\nlisten: 10.1.0.2:4443\nadmin: %s\nhealth: 10.1.0.2:4445\n",
				filepath.Join(tmpDir, "fabric"), lone.socket)
			if err := os.WriteFile(lone.config, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			lone.start(t)
			e.healthProbeAt(t, "10.1.0.2", 4445, "ok")
		})
	}
}
