package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/packet"
)

// healthPort is where a's health: responder listens on its LAN address
// (answerHealth).
const healthPort = 4444

// answerHealth restarts a with a health: responder on its LAN address and
// waits until it serves b's import again.
func answerHealth(t *testing.T, e *packetEnv) {
	t.Helper()
	f, err := os.OpenFile(e.a.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "health: 10.1.0.1:%d\n", healthPort); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.a.restart(t)
	e.a.waitLive(t, "b", 1)
}

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
			answerHealth(t, e)
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

// TestPeerChangeKeepsAnswering: a Peer resource that changes the gateway
// list of an importing gateway's only peer gives it a new pool, which hears
// no one until its first session is up; the gateway must not take that for
// being cut off and refuse its cluster's health probes (docs/failover.md,
// "A gateway cut off from its peers"). The new list names a port of b where
// nothing listens, so the gap lasts: a's responder answers throughout
// several of reach.go's rechecks (reachRecheck, 1 s apart), where it
// refused from the first of them before. Once the list is b's again and the
// new pool has heard b, a cut uplink still makes a refuse.
func TestPeerChangeKeepsAnswering(t *testing.T) {
	e := setupPacket(t, gateway.DataPlaneStream, gateway.DataPlaneStream, false)
	answerHealth(t, e)
	e.healthProbeAt(t, "10.1.0.1", healthPort, "ok")

	e.a.apply(t, peerYAML("b", "192.0.2.2:4449"))
	// Three rechecks: the watch is not a threshold, a slow host only
	// makes the test weaker, never fail with the rule in place.
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		if out := e.healthProbeOnce("10.1.0.1", healthPort); out != "ok" {
			t.Fatalf("health probe to a after the Peer change: %s, want ok (a took its new pool's silence for a cut-off)", out)
		}
	}

	e.a.apply(t, peerYAML("b", "192.0.2.2:4443"))
	e.a.waitLive(t, "b", 1)
	e.healthProbeAt(t, "10.1.0.1", healthPort, "ok")
	testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "down")
	e.healthProbeAt(t, "10.1.0.1", healthPort, "refused")
	testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "up")
	e.healthProbeAt(t, "10.1.0.1", healthPort, "ok")
	e.curl(t, "after the uplink came back")
}
