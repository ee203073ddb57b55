package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/dnsname"
	"github.com/strait-net/strait/packet"
	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/ring"
	"github.com/strait-net/strait/tunnel"
)

// The packet mode in the gateway (docs/packet.md, "The gateway"). A peer
// whose PeerConfig says data-plane packet is offered the mode over the
// sessions' control (packetctl.go); when the peer's gateway says packet
// too, this node's eBPF programs carry the imports of the peer's exports
// and the peer's packets to this cluster's exports, and the stream mode
// stays in place for everything else. A peer that does not agree keeps
// the stream mode, and the refusal is logged, shown in status and
// counted: nothing switches silently.

// PeerConfig is the gateway's setting for one peer cluster.
type PeerConfig struct {
	// DataPlane is how the peer's traffic travels: "stream" (the default;
	// TLS streams relayed by the gateways) or "packet" (packets forwarded
	// by eBPF programs inside VXLAN, unencrypted: docs/packet.md). The
	// packet mode needs both gateways to say packet for each other.
	DataPlane string `yaml:"data-plane"`
}

// PacketConfig is this gateway node's packet mode (package packet's
// Config, in the file's words).
type PacketConfig struct {
	// Name names the node's pin directory under PinRoot (default: the
	// cluster ID).
	Name string `yaml:"name"`
	// PinRoot is a bpffs directory (default /sys/fs/bpf/strait). A gateway
	// started with `ip netns exec` needs a bpffs mounted elsewhere.
	PinRoot string `yaml:"pin-root"`
	// LAN is the interface toward the cluster's nodes: clients' packets
	// to imports and targets' replies arrive on it. Required.
	LAN string `yaml:"lan"`
	// SNAT is the address exported flows leave with toward their targets:
	// an address of this node that no local socket uses (a second address
	// on LAN). Required.
	SNAT string `yaml:"snat"`
	// UnderlayMTU is the MTU between gateway nodes, which the programs'
	// MSS clamp and VXLAN device are sized for. 0 (the default): the
	// smallest MTU of this node's routes to the peer gateways (the route's
	// own mtu, else its device's), read again at every sync of the maps, so
	// a changed route or device is followed (docs/packet.md, "MTU"). A
	// value set here is used as it is.
	UnderlayMTU int `yaml:"underlay-mtu"`
	// TeardownOnExit makes a gateway that stops on its own (SIGTERM,
	// SIGINT) detach its programs and remove every pin and its VXLAN
	// device; `strait gateway --packet-teardown` sets it. Without it the
	// programs keep forwarding while the process is gone and the next
	// start adopts them.
	TeardownOnExit bool `yaml:"teardown-on-exit"`
	// ProbePort is the UDP port of the liveness probes that the gateway
	// nodes' programs answer themselves, from peer gateways through the
	// tunnel and, as health probes to this node's addresses, from its
	// cluster's nodes on lan (0: packet.DefaultProbePort, 4790; -1: this
	// node neither answers nor sends any). Every gateway of the
	// clusterset must agree. ProbeInterval and ProbeMisses are how often
	// this gateway probes each peer gateway it sends imports to, and how
	// many probes in a row must go unanswered for it to be taken out
	// (0: 10ms and 3: 30–40 ms after its path died; docs/packet.md,
	// "Health").
	ProbePort     int           `yaml:"probe-port"`
	ProbeInterval time.Duration `yaml:"probe-interval"`
	ProbeMisses   int           `yaml:"probe-misses"`
	// FlowEntries is how many import flows the programs pin at once (0:
	// packet.DefaultFlowEntries, 65536). When the map is full the least
	// recently used entry is evicted: its flow is placed again by the
	// Maglev table on its next packet, on the same gateway while the
	// peer's gateways are unchanged (docs/packet.md, "A full flow map").
	// The map's size is fixed when the programs are loaded: a changed
	// value takes `strait packet teardown` and a restart.
	FlowEntries int `yaml:"flow-entries"`
}

// packetHelloInterval is how often a gateway offers the packet mode to a
// peer: what bounds how long a changed configuration or a restarted peer
// takes to be seen. The messages are small and per peer.
const packetHelloInterval = time.Second

// packetSettle is how long a starting gateway leaves the pinned maps as an
// earlier process left them while its peers have not all answered: a
// restart must not empty maps that are forwarding.
const packetSettle = 10 * time.Second

// packetControlTimeout bounds one control exchange.
const packetControlTimeout = 5 * time.Second

func (c *Config) packetPeers() []string {
	var out []string
	for id, p := range c.Peers {
		if p.DataPlane == DataPlanePacket {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (c *Config) dataPlane(peer string) string {
	if p, ok := c.Peers[peer]; ok && p.DataPlane != "" {
		return p.DataPlane
	}
	return DataPlaneStream
}

// dataPlane is the data plane toward peer: its Peer resource's
// spec.dataPlane when set, else the configuration's (docs/packet.md, "The
// gateway"). A Peer resource asking for the packet mode of a gateway
// without a packet section gets the stream mode and the reason.
func (g *Gateway) dataPlane(peer string) (mode, reason string) {
	if r, ok := g.store.Set().Get(catalog.Key{Kind: catalog.KindPeer, Name: peer}); ok {
		switch dp := r.(*catalog.Peer).Spec.DataPlane; {
		case dp == catalog.DataPlanePacket && g.cfg.Packet.LAN == "":
			return DataPlaneStream, fmt.Sprintf("Peer %s asks for dataPlane packet, but this gateway has no packet section (packet.lan, packet.snat)", peer)
		case dp != "":
			return string(dp), ""
		}
	}
	return g.cfg.dataPlane(peer), ""
}

// peerIDs are the peers named by the configuration or by Peer resources.
func (g *Gateway) peerIDs() map[string]bool {
	ids := map[string]bool{}
	for id := range g.cfg.Peers {
		ids[id] = true
	}
	for _, r := range g.store.Set().List(catalog.KindPeer) {
		if id := r.(*catalog.Peer).Metadata.Name; id != g.cfg.Cluster {
			ids[id] = true
		}
	}
	return ids
}

// packetPeers are the peers whose data plane is the packet mode, by the
// configuration or their Peer resources, sorted.
func (g *Gateway) packetPeers() []string {
	var out []string
	for id := range g.peerIDs() {
		if mode, _ := g.dataPlane(id); mode == DataPlanePacket {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// streamsMayServeExports reports whether a stream may reach this
// gateway's exports: a peer in the stream mode may open one, and so may
// any peer before Peers are known. Only when every peer is in the packet
// mode do its exports get packets alone.
func (g *Gateway) streamsMayServeExports() bool {
	ids := g.peerIDs()
	if len(ids) == 0 {
		return true
	}
	for id := range ids {
		if mode, _ := g.dataPlane(id); mode != DataPlanePacket {
			return true
		}
	}
	return false
}

func (c *Config) validatePacket() error {
	for id, p := range c.Peers {
		if !dnsname.IsLabel(id) {
			return fmt.Errorf("peers.%s: a peer is named by its cluster ID, a DNS label", id)
		}
		switch p.DataPlane {
		case "", DataPlaneStream, DataPlanePacket:
		default:
			return fmt.Errorf("peers.%s.data-plane %q: must be %s or %s", id, p.DataPlane, DataPlaneStream, DataPlanePacket)
		}
	}
	if len(c.packetPeers()) == 0 && c.Packet == (PacketConfig{}) {
		return nil
	}
	if c.Packet.LAN == "" {
		return errors.New("packet.lan: required when a peer's data-plane is packet (the interface toward the cluster)")
	}
	if a, err := netip.ParseAddr(c.Packet.SNAT); err != nil || !a.Is4() {
		return fmt.Errorf("packet.snat %q: required when a peer's data-plane is packet: an IPv4 address of this node no local socket uses", c.Packet.SNAT)
	}
	if c.Packet.PinRoot != "" && !filepath.IsAbs(c.Packet.PinRoot) {
		return fmt.Errorf("packet.pin-root %q: want an absolute path on a bpffs mount", c.Packet.PinRoot)
	}
	if m := c.Packet.UnderlayMTU; m != 0 && (m < packet.MinUnderlayMTU || m > 65535) {
		return fmt.Errorf("packet.underlay-mtu %d: allowed %d..65535 (0: the smallest MTU of the routes to the peer gateways)", m, packet.MinUnderlayMTU)
	}
	if p := c.Packet.ProbePort; p < -1 || p > 65535 {
		return fmt.Errorf("packet.probe-port %d: allowed 1..65535 (0: %d, -1: no probes)", p, packet.DefaultProbePort)
	}
	if i := c.Packet.ProbeInterval; i != 0 && (i < time.Millisecond || i > 10*time.Second) {
		return fmt.Errorf("packet.probe-interval %v: allowed 1ms..10s (0: %v)", i, packet.DefaultProbeInterval)
	}
	if m := c.Packet.ProbeMisses; m < 0 || m > 1000 {
		return fmt.Errorf("packet.probe-misses %d: allowed 1..1000 (0: %d)", m, packet.DefaultProbeMisses)
	}
	if n := c.Packet.FlowEntries; n < 0 || n > packet.MaxFlowEntries {
		return fmt.Errorf("packet.flow-entries %d: allowed 1..%d (0: %d)", n, packet.MaxFlowEntries, packet.DefaultFlowEntries)
	}
	pc := c.packetConfig()
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("packet.%w", err)
	}
	return nil
}

// proberConfig is the packet section's probing, ok false when it is off.
func (c *Config) proberConfig(log *slog.Logger) (packet.ProberConfig, bool) {
	if c.Packet.ProbePort < 0 {
		return packet.ProberConfig{}, false
	}
	pc := c.packetConfig()
	// The peers' VXLAN port and VNI are this node's: peers must agree.
	return packet.ProberConfig{Port: uint16(c.Packet.ProbePort), TunnelPort: pc.TunnelPort, VNI: pc.VNI,
		Interval: c.Packet.ProbeInterval, Misses: c.Packet.ProbeMisses, Log: log}, true
}

func (c *Config) packetConfig() packet.Config {
	name := c.Packet.Name
	if name == "" {
		name = c.Cluster
	}
	snat, _ := netip.ParseAddr(c.Packet.SNAT)
	pc := packet.Config{Name: name, PinRoot: c.Packet.PinRoot, LAN: c.Packet.LAN, SNAT: snat, UnderlayMTU: c.Packet.UnderlayMTU,
		FlowEntries: c.Packet.FlowEntries}
	if c.Packet.ProbePort < 0 {
		pc.NoProbes = true
	} else {
		pc.ProbePort = uint16(c.Packet.ProbePort)
	}
	return pc
}

// packetPlane is the gateway's packet mode: the datapath (nil when no peer
// is configured for it; the plane then only answers peers' offers) and
// what each peer said.
type packetPlane struct {
	g    *Gateway
	log  *slog.Logger
	dp   *packet.Datapath
	kick chan struct{}
	// prober probes the gateways of the peers this one imports from
	// through their programs (nil until attached, or with probes off).
	prober atomic.Pointer[packet.Prober]

	mu      sync.Mutex // guards below and the datapath's maps
	peers   map[string]*packetPeer
	start   time.Time
	synced  bool        // the maps were written once by this process
	rules   []string    // compiled policy rules, index = rule_drops index
	health  string      // the gateways' liveness the maps were written with
	written *packetWant // what the maps hold, as this process wrote them
	syncErr string      // the last sync's error, "" if none
	// attachErr is why the programs could not be attached when a Peer
	// resource asked for the mode, "" if they were or nobody asked.
	attachErr string
	// gwUp is what the maps say of each importing peer's gateways
	// (peer → gateway → alive), for strait_packet_gateway_up.
	gwUp map[string]map[string]bool
	// rings are the Maglev tables built, by member set.
	rings map[string]*ring.Table
	// mtuSaid is the underlay MTU choice last logged, and mtuErr the
	// route lookups' last error (each logged once per change).
	mtuSaid, mtuErr string
	// flowCount is the flow map's last count, for /metrics.
	flowCount flowMapCount
}

// packetPeer is what one peer said about the packet mode.
type packetPeer struct {
	answer string       // its answer to our offer: "", stream or packet
	reason string       // why the mode is not in use for it ("" when it is)
	heard  *packetHello // its last offer of the packet mode, nil if none
	asked  string       // the mode of its last hello, "" if none came
	active bool         // the mode carries its traffic (for transitions)
	logged string       // the refusal last logged and counted
	unsent int          // Workload addresses left out of the last hello
}

// PeerDataPlane is a peer's data-plane mode in Status.
type PeerDataPlane struct {
	Cluster string `json:"cluster"`
	// Configured is this gateway's setting for the peer; Peer is what the
	// peer's gateway answered ("" when it has not yet).
	Configured string `json:"configured"`
	Peer       string `json:"peer,omitempty"`
	// Active is true when packets of this peer take the packet mode:
	// Imports when this gateway sends its imports of the peer's exports as
	// packets, Exports when it takes the peer's packets to its exports
	// (once the peer offered its imports).
	Active  bool `json:"active"`
	Imports bool `json:"imports"`
	Exports bool `json:"exports"`
	// Reason says why the packet mode is not in use, when it is refused.
	Reason string `json:"reason,omitempty"`
}

func newPacketPlane(g *Gateway) *packetPlane {
	return &packetPlane{g: g, log: g.log, kick: make(chan struct{}, 1), peers: map[string]*packetPeer{}, rings: map[string]*ring.Table{}}
}

func (p *packetPlane) peer(id string) *packetPeer {
	pp, ok := p.peers[id]
	if !ok {
		pp = &packetPeer{}
		p.peers[id] = pp
	}
	return pp
}

// startDatapath loads and attaches the programs, adopting what an earlier process
// pinned, when some peer is configured for the packet mode. A kernel or
// host that cannot run them fails the gateway's start with the reason:
// the configuration asked for the mode, so nothing falls back silently.
// A gateway with a packet section and no peer configured for the mode
// attaches once a Peer resource asks for it (attachWhenAsked).
func (p *packetPlane) startDatapath(ctx context.Context) error {
	p.start = time.Now()
	if len(p.g.cfg.packetPeers()) == 0 {
		if p.g.cfg.Packet.LAN != "" {
			p.g.spawn(func() { p.attachWhenAsked(ctx) })
		}
		return nil
	}
	if err := p.attach(ctx); err != nil {
		return fmt.Errorf("packet mode: %w", err)
	}
	return nil
}

func (p *packetPlane) attach(ctx context.Context) error {
	pc := p.g.cfg.packetConfig()
	if pc.UnderlayMTU == 0 {
		// Sized from the start for the peers the resources name, when the
		// routes to them are known; sync follows changes.
		if path, ok, _ := packet.UnderlayPathMTU(p.g.packetPeerAddrs()); ok && path.MTU >= packet.MinUnderlayMTU {
			pc.UnderlayMTU = path.MTU
		}
	}
	dp, err := packet.Load(pc, p.log)
	if err != nil {
		return err
	}
	if err := dp.Attach(ctx); err != nil {
		dp.Close()
		return err
	}
	p.mu.Lock()
	p.dp = dp
	// The maps wait for the peers' answers from now, not from the
	// gateway's start (settled), when a Peer resource asked later.
	p.start = time.Now()
	p.attachErr = ""
	p.mu.Unlock()
	p.log.Info("packet mode attached", "lan", p.g.cfg.Packet.LAN, "pins", p.pinDir(), "peers", p.g.packetPeers())
	if pc, ok := p.g.cfg.proberConfig(p.log); ok {
		pr, err := packet.NewProber(pc)
		if err != nil {
			// The programs forward and answer others' probes without it;
			// the sessions judge the peers' gateways then.
			p.log.Warn("packet mode: no prober; the sessions' health judges the peers' gateways", "err", err)
		} else {
			p.prober.Store(pr)
			p.g.spawn(func() {
				_ = pr.Run(ctx)
				pr.Close()
			})
		}
	}
	p.g.spawn(func() { p.run(ctx) })
	p.g.spawn(func() { p.watchHealth(ctx) })
	if p.g.cfg.Packet.UnderlayMTU == 0 {
		p.g.spawn(func() { p.followMTU(ctx) })
	}
	return nil
}

// followMTU syncs the maps as soon as a link of this node gets another MTU,
// so the programs' size and the peers' MSS (read from the routes at each
// sync: sizeUnderlay, peerMSS) follow at once, where otherwise they would
// wait for the next sync, up to packetHelloInterval later. Without the
// kernel's notifications they still follow at that pace.
func (p *packetPlane) followMTU(ctx context.Context) {
	if err := packet.WatchMTU(ctx, p.changed); err != nil {
		p.log.Warn("packet mode: link MTU changes followed at the next sync only", "err", err)
	}
}

// attachWhenAsked attaches the programs once a Peer resource asks for the
// packet mode. Failing to then is logged (once per error) and shown as the
// peers' reason, and retried each packetHelloInterval: the gateway is
// running already, and its streams carry those peers meanwhile.
func (p *packetPlane) attachWhenAsked(ctx context.Context) {
	t := time.NewTicker(packetHelloInterval)
	defer t.Stop()
	var logged string
	for {
		if len(p.g.packetPeers()) > 0 {
			err := p.attach(ctx)
			if err == nil {
				return
			}
			if msg := "packet mode: " + err.Error(); msg != logged {
				p.log.Warn("packet mode asked for by a Peer resource, not attached", "err", err)
				logged = msg
				p.mu.Lock()
				p.attachErr = msg
				p.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

func (p *packetPlane) pinDir() string {
	c := p.g.cfg.packetConfig()
	return c.Dir()
}

// changed asks for a new offer to every peer and a sync of the maps (a
// no-op without the datapath: nothing reads the channel then).
func (p *packetPlane) changed() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// close releases the datapath: its pins stay and forwarding goes on,
// unless the operator asked for a teardown on exit.
func (p *packetPlane) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dp == nil {
		return
	}
	if p.g.cfg.Packet.TeardownOnExit {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.dp.Teardown(ctx); err != nil {
			p.log.Warn("packet mode teardown incomplete", "err", err)
		} else {
			p.log.Info("packet mode torn down", "pins", p.pinDir())
		}
	} else {
		p.dp.Close()
	}
	p.dp = nil
}

func (p *packetPlane) run(ctx context.Context) {
	t := time.NewTicker(packetHelloInterval)
	defer t.Stop()
	for {
		p.offerAll(ctx)
		p.sync()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// watchHealth rewrites the Maglev tables and the peers' liveness when the
// prober (the programs' answers) or the health checker (the pools' probes)
// takes a peer gateway out or back: at once for the prober, within a probe
// interval for the checker. The checker's verdicts are polled only while
// one decides (sessionsJudge); otherwise this wakes once a second, to
// notice when one starts to: polling every interval for nothing (the
// liveness read through the store, 100 times a second) was a tenth of an
// importing gateway's CPU in the packet mode (docs/packet.md, "UDP at
// 900 Mbit/s"), and sync rewrites the liveness every second anyway.
func (p *packetPlane) watchHealth(ctx context.Context) {
	interval := p.g.cfg.probeInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	var changed <-chan struct{}
	if pr := p.prober.Load(); pr != nil {
		changed = pr.Changed()
	}
	polling := true
	for {
		if poll := p.sessionsJudge(); poll != polling {
			polling = poll
			if poll {
				t.Reset(interval)
			} else {
				t.Reset(packetHelloInterval)
			}
		}
		p.setSessionProbes()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
			p.g.kickReach() // a prober verdict is reach.go's too
		}
		_, h := p.g.packetLiveness()
		p.mu.Lock()
		stale := p.synced && h != p.health
		p.mu.Unlock()
		if stale {
			start := time.Now()
			p.sync()
			p.log.Info("packet mode: peer gateways' health written to the maps", "health", h, "took", time.Since(start).Round(10*time.Microsecond))
		}
	}
}

// setSessionProbes runs the stream mode's probes toward each packet peer
// at the interval its role there needs: the configuration's while the
// peer's sessions may carry its traffic or judge one of its gateways, and
// a slow one (sessionProbeInterval) once the packet mode carries the
// peer's traffic both ways and every one of its gateways answered the
// prober. The prober judges them from then on (packetLiveness); the
// sessions carry only the control streams, and their pool and keepalives
// waking a hundred times a second was most of an idle gateway's CPU
// (docs/packet.md, "What the gateway processes cost"). A peer that falls
// back to the stream mode gets the configuration's interval again within
// a second (this runs on each of watchHealth's wakeups).
func (p *packetPlane) setSessionProbes() {
	pr := p.prober.Load()
	slow := map[string]int{} // peer → its gateways all answering (0: not so)
	p.mu.Lock()
	for id, pp := range p.peers {
		slow[id] = 0
		gws, importing := p.gwUp[id]
		if pr == nil || !pp.active || pp.answer != DataPlanePacket || !importing || len(gws) == 0 {
			continue
		}
		answered := true
		for gw := range gws {
			a, err := underlayAddr(gw)
			if st, ok := pr.State(a); err != nil || !ok || !st.Answered {
				answered = false
				break
			}
		}
		if answered {
			slow[id] = len(gws)
		}
	}
	p.mu.Unlock()
	for id, n := range slow {
		pool := p.g.peer(id)
		if pool == nil {
			continue
		}
		// Every gateway of the pool is one the maps know (a pool whose
		// Peer resource just changed may name others).
		if n > 0 && n == len(pool.Gateways()) {
			pool.SetProbeInterval(p.g.cfg.sessionProbeInterval())
		} else {
			pool.SetProbeInterval(0)
		}
	}
}

// sessionsJudge reports whether some gateway of a peer this gateway
// imports from is judged by its sessions (its programs never answered the
// prober, or there is no prober). Only the importing side's liveness
// decides where packets go: an exporting-only peer's gateways are checked
// against peers by address alone.
func (p *packetPlane) sessionsJudge() bool {
	pr := p.prober.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, gws := range p.gwUp {
		for gw := range gws {
			if pr == nil {
				return true
			}
			a, err := underlayAddr(gw)
			if err != nil {
				return true
			}
			if st, ok := pr.State(a); !ok || !st.Answered {
				return true
			}
		}
	}
	return false
}

// setLANProbes makes the programs answer the LAN's health probes or
// refuse them (watchReach); before the programs are attached it does
// nothing, and Attach leaves them answering.
func (p *packetPlane) setLANProbes(answer bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dp == nil {
		return
	}
	if err := p.dp.SetLANProbes(answer); err != nil {
		p.log.Warn("packet mode: LAN health probes not switched", "answer", answer, "err", err)
	}
}

// packetLiveness is the liveness of every packet peer's gateways (peer →
// gateway → live), and the same as a string that changes when any of them
// does. A gateway whose programs answered this gateway's prober is judged
// by their answers alone: its process may be dead or restarting while its
// pinned programs forward (docs/packet.md, "Health"). One that never
// answered (its programs answer no probes, or its path was down since this
// process started) is judged by its sessions, as the stream mode does.
func (g *Gateway) packetLiveness() (map[string]map[string]bool, string) {
	var b strings.Builder
	pr := g.packet.prober.Load()
	live := map[string]map[string]bool{}
	for _, id := range g.packetPeers() {
		pool := g.peer(id)
		if pool == nil {
			continue
		}
		live[id] = map[string]bool{}
		for _, h := range pool.Gateways() {
			up, by := h.Live, "sessions"
			if pr != nil {
				if a, err := underlayAddr(h.Addr); err == nil {
					if st, ok := pr.State(a); ok && st.Answered {
						up, by = st.Live, "probes"
					}
				}
			}
			live[id][h.Addr] = up
			fmt.Fprintf(&b, "%s/%s=%v(%s) ", id, h.Addr, up, by)
		}
	}
	return live, b.String()
}

// offerAll offers the packet mode to every peer configured for it.
func (p *packetPlane) offerAll(ctx context.Context) {
	for _, id := range p.g.packetPeers() {
		if ctx.Err() != nil {
			return
		}
		pool := p.g.peer(id)
		if pool == nil {
			p.setAnswer(id, "", "no Peer resource names cluster "+id)
			continue
		}
		hello := p.helloFor(id)
		// Each offer goes to the gateway a random key picks: as many
		// offers as the peer has gateways, so that every one of them
		// (each fills its own exports map) soon hears one.
		for range max(1, len(pool.Gateways())) {
			ans, err := offer(ctx, pool, hello)
			var reset *tunnel.ResetError
			switch {
			case err == nil:
				p.setAnswer(id, ans.Mode, ans.Reason)
			case errors.As(err, &reset) && reset.Remote:
				// A gateway that does not know the control stream resets it.
				p.setAnswer(id, DataPlaneStream, "the peer's gateway refused the packet mode's control stream: "+reset.Reason)
			default:
				// No session (the peer restarts): what it said last
				// stands, and its pinned maps keep forwarding meanwhile.
				p.log.Debug("packet mode offer failed", "peer", id, "err", err)
			}
		}
	}
}

// offer sends hello on a new control stream and reads the answer.
func offer(ctx context.Context, pool *tunnel.Pool, hello *packetHello) (*packetAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, packetControlTimeout)
	defer cancel()
	body, err := json.Marshal(hello)
	if err != nil {
		return nil, err
	}
	// A fresh key each time: a peer with several gateways hears offers on
	// each of them in turn.
	st, err := pool.OpenStream(ctx, rand.Uint64(), packetHeader)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(packetControlTimeout))
	if _, err := st.Write(body); err != nil {
		return nil, err
	}
	if err := st.CloseWrite(); err != nil {
		return nil, err
	}
	return parsePacketAnswer(st)
}

// helloFor is this gateway's offer to peer: the mode, its sources (the
// Workloads' addresses first) and the imports of the peer's exports.
func (p *packetPlane) helloFor(peer string) *packetHello {
	srcs, unsent := helloSources(p.g.workloadSources(), sourcesOf(p.g.cfg.Sources))
	p.setUnsent(peer, unsent)
	h := &packetHello{Mode: DataPlanePacket, Sources: srcs}
	for _, r := range p.g.store.Set().List(catalog.KindServiceImport) {
		imp := r.(*catalog.ServiceImport)
		for _, s := range packetServices(imp, peer) {
			h.Imports = append(h.Imports, packetImport{
				Namespace: imp.Metadata.Namespace, Name: imp.Metadata.Name,
				Address: s.Addr.String(), Port: s.Port, Protocol: s.Proto.String(),
			})
		}
	}
	return h
}

// packetServices are the clusterset addresses, ports and protocols of imp
// that the packet mode may carry to peer: those of an import that lists
// peer among its source clusters, IPv4 and TCP or UDP. Whether it does
// is sync's choice (packetImportCluster): an import of several clusters
// is offered to each of them, so that each fills its exports map.
func packetServices(imp *catalog.ServiceImport, peer string) []packet.Service {
	if !slices.Contains(imp.SourceClusters(), peer) {
		return nil
	}
	return packetAddrs(imp)
}

// packetAddrs are imp's IPv4 addresses × TCP and UDP ports.
func packetAddrs(imp *catalog.ServiceImport) []packet.Service {
	var out []packet.Service
	for _, ipStr := range imp.Spec.IPs {
		ip, err := netip.ParseAddr(ipStr)
		if err != nil || !ip.Unmap().Is4() {
			continue
		}
		for _, port := range imp.Spec.Ports {
			proto, err := packet.ParseProto(string(port.Protocol))
			if err != nil || port.Port < 1 || port.Port > 65535 {
				continue
			}
			out = append(out, packet.Service{Addr: ip.Unmap(), Port: uint16(port.Port), Proto: proto})
		}
	}
	return out
}

// setUnsent records, counts and logs (once per change) the Workload
// addresses a hello to peer left out.
func (p *packetPlane) setUnsent(peer string, n int) {
	p.g.metrics.packetUnsent.WithLabelValues(peer).Set(float64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.peer(peer)
	if n != pp.unsent && n > 0 {
		p.log.Warn("packet mode: Workload addresses left out of the hello to a peer; its ingress policy sees them as the configured source holding them",
			"peer", peer, "unsent", n, "max-sources", maxPacketSources)
	}
	pp.unsent = n
}

func (p *packetPlane) setAnswer(peer, mode, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.peer(peer)
	pp.answer = mode
	pp.reason = ""
	if mode != DataPlanePacket {
		// Its answer is its configuration now: an offer it made while it
		// was configured for the packet mode no longer stands.
		pp.heard = nil
		pp.reason = reason
		if pp.reason == "" && mode == DataPlaneStream {
			pp.reason = "the peer's gateway is configured for the stream mode"
		}
	}
}

// servePacketControl answers a peer's offer of the packet mode.
func (g *Gateway) servePacketControl(peer string, st tunnel.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(packetControlTimeout))
	h, err := parsePacketHello(st)
	if err != nil {
		g.log.Warn("packet mode: bad offer", "peer", peer, "err", err)
		_ = st.Reset(err.Error())
		return
	}
	ans, changed := g.packet.heard(peer, h)
	b, _ := json.Marshal(ans)
	if _, err := st.Write(b); err == nil {
		_ = st.CloseWrite()
	}
	// Only a new offer wakes the plane: waking on every one would make two
	// gateways answer each other's offers with offers, back to back.
	if changed {
		g.packet.changed()
	}
}

// heard records a peer's offer and returns this gateway's answer, and
// whether the offer changes what the maps should hold.
func (p *packetPlane) heard(peer string, h *packetHello) (packetAnswer, bool) {
	mine, _ := p.g.dataPlane(peer)
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.peer(peer)
	first := pp.asked != h.Mode
	pp.asked = h.Mode
	if h.Mode == DataPlanePacket && mine == DataPlanePacket {
		changed := pp.heard == nil || !reflect.DeepEqual(*pp.heard, *h)
		pp.heard = h
		return packetAnswer{Mode: DataPlanePacket}, changed
	}
	if h.Mode == DataPlanePacket && first {
		// Here, not at the peer only: both operators should see it.
		p.g.metrics.packetRefusals.WithLabelValues(peer).Inc()
		p.log.Warn("packet mode refused: the peer offers it, this gateway's configuration says stream for it", "peer", peer)
	}
	changed := pp.heard != nil
	pp.heard = nil
	return packetAnswer{Mode: mine, Reason: fmt.Sprintf("cluster %s's gateway is configured with data-plane %s for peer %s", p.g.cfg.Cluster, mine, peer)}, changed
}

// settled reports whether every packet peer has answered and, where it
// agreed, offered its own side, so that the maps can be written without
// dropping what an earlier process left forwarding; after packetSettle
// they are written anyway.
func (p *packetPlane) settled() bool {
	if time.Since(p.start) > packetSettle {
		return true
	}
	for _, id := range p.g.packetPeers() {
		pp := p.peer(id)
		if pp.answer == "" || (pp.answer == DataPlanePacket && pp.heard == nil) {
			return false
		}
	}
	return true
}

// sync makes the maps hold what the resources and the peers' answers say.
func (p *packetPlane) sync() {
	set := p.g.store.Set()
	rt := p.g.routes.Load()
	live, health := p.g.packetLiveness()
	peerRes := map[string]*catalog.Peer{}
	var names []string
	for _, r := range set.List(catalog.KindPeer) {
		pr := r.(*catalog.Peer)
		if pr.Metadata.Name != p.g.cfg.Cluster {
			peerRes[pr.Metadata.Name] = pr
			names = append(names, pr.Metadata.Name)
		}
	}
	var imports []*catalog.ServiceImport
	for _, r := range set.List(catalog.KindServiceImport) {
		imports = append(imports, r.(*catalog.ServiceImport))
	}
	workloads := p.g.workloadSources()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dp == nil || !p.settled() {
		return
	}
	w := packetWant{
		imports: map[packet.Service]packet.Import{}, exports: map[packet.Service]packet.Export{},
		peers: map[netip.Addr]packet.Peer{},
	}
	// Egress: the Workloads' addresses ahead of the configured sources, as
	// the stream mode's source() decides (docs/packet.md, "Workloads").
	local := append(packetSources(workloads), packetSources(sourcesOf(p.g.cfg.Sources))...)
	clusters := []packet.ClusterSources{{ID: 0, Name: p.g.cfg.Cluster, Sources: local, DefaultNamespace: DefaultNS}}
	var services []packet.ServiceRef
	nextID := uint32(1)
	exportIDs := map[nsName]uint32{}
	var errs []string
	var targets []netip.Addr
	gwUp := map[string]map[string]bool{}
	// The importing peers' tables: slot, gateways, and whether all of
	// them are dead (which packetDown does not take out).
	slots := map[string]uint32{}
	peerGws := map[string]map[string]netip.Addr{}
	dead := map[string]bool{}
	for i, id := range names {
		if mode, _ := p.g.dataPlane(id); mode != DataPlanePacket {
			if pp, ok := p.peers[id]; ok && pp.active {
				// Its Peer resource changed the mode: streams carry it.
				pp.reason = "this gateway's data plane for the peer is now " + mode
				p.transition(id, pp, false)
			}
			continue
		}
		pp := p.peer(id)
		gws, err := underlay(peerRes[id])
		if err != nil {
			pp.reason = err.Error()
			p.transition(id, pp, false)
			continue
		}
		clusterID := uint32(i + 1)
		importing := pp.answer == DataPlanePacket
		exporting := pp.heard != nil
		p.transition(id, pp, importing || exporting)
		if !importing && !exporting {
			continue
		}
		down := packetDown(gws, live[id])
		for addr, ip := range gws {
			w.peers[ip] = packet.Peer{Cluster: clusterID, Alive: !down[addr], MSS: p.peerMSS(ip)}
		}
		if importing {
			gwUp[id] = map[string]bool{}
			for addr, ip := range gws {
				targets = append(targets, ip)
				gwUp[id][addr] = !down[addr]
			}
			if len(w.tables) >= p.dp.Tables() {
				errs = append(errs, fmt.Sprintf("peer %s: more exporting peers than packet tables (%d)", id, p.dp.Tables()))
			} else {
				t, err := packetTable(gws, live[id], p.rings)
				if err != nil {
					errs = append(errs, fmt.Sprintf("peer %s: %v", id, err))
				} else {
					slots[id] = uint32(len(w.tables))
					w.tables = append(w.tables, t)
					peerGws[id] = gws
					dead[id] = allDead(gws, live[id])
				}
			}
		}
		if exporting {
			clusters = append(clusters, packet.ClusterSources{ID: clusterID, Name: id, Sources: packetSources(pp.heard.Sources), DefaultNamespace: DefaultNS})
			for _, im := range pp.heard.Imports {
				k := nsName{im.Namespace, im.Name}
				exp, ok := rt.exports[k]
				if !ok {
					continue // no such export: its packets are counted as unknown
				}
				target, err := exp.TargetForProtocol(catalog.Protocol(im.Protocol), int32(im.Port))
				if err != nil {
					continue // no such port: counted as unknown too
				}
				ta, err := netip.ParseAddrPort(target)
				if err != nil || !ta.Addr().Unmap().Is4() {
					errs = append(errs, fmt.Sprintf("export %s/%s: target %q: the packet mode needs an IPv4 address:port", im.Namespace, im.Name, target))
					continue
				}
				sid, ok := exportIDs[k]
				if !ok {
					sid = nextID
					nextID++
					exportIDs[k] = sid
					services = append(services, packet.ServiceRef{ID: sid, Dest: policy.Destination{
						Export: exp.Metadata.Name, Namespace: exp.Metadata.Namespace, Labels: exp.Metadata.Labels}})
				}
				a, _ := netip.ParseAddr(im.Address)
				proto, _ := packet.ParseProto(im.Protocol)
				s := packet.Service{Addr: a, Port: im.Port, Proto: proto}
				if _, dup := w.exports[s]; !dup {
					w.exports[s] = packet.Export{Target: netip.AddrPortFrom(ta.Addr().Unmap(), ta.Port()), ID: sid}
				}
			}
		}
	}
	// Imports: each on the table of the cluster it prefers among those
	// alive, as the stream mode tries its clusters in order
	// (docs/packet.md, "Imports of several clusters").
	failed := map[string]bool{}
	for _, imp := range imports {
		svcs := packetAddrs(imp)
		if len(svcs) == 0 {
			continue
		}
		c, ok, skipped := packetImportCluster(imp.SourceClusters(), slots, dead)
		if !ok {
			continue // a source cluster the packet mode does not carry: streams carry the import
		}
		for _, s := range skipped {
			failed[s] = true
		}
		sid := nextID
		nextID++
		services = append(services, packet.ServiceRef{ID: sid, Dest: policy.Destination{
			Export: imp.Metadata.Name, Namespace: imp.Metadata.Namespace, Labels: imp.Metadata.Labels}})
		for _, s := range svcs {
			w.imports[s] = packet.Import{ID: sid, Table: slots[c]}
		}
	}
	// A dead cluster that an import failed over from: its gateways are
	// dead in peers, so that the flows pinned to them move (to the table
	// their import now names); packetDown alone keeps an all-dead
	// cluster's gateways, having nowhere else to send.
	for id := range failed {
		for addr, ip := range peerGws[id] {
			w.peers[ip] = packet.Peer{Cluster: w.peers[ip].Cluster, Alive: false, MSS: w.peers[ip].MSS}
			gwUp[id][addr] = false
		}
	}
	var err error
	var rules []string
	w.policy, rules, err = packet.CompilePolicy(rt.policy, clusters, services)
	switch {
	case err != nil:
		errs = append(errs, err.Error())
	case w.same(p.written):
	default:
		if err := w.write(p.dp, p.written); err != nil {
			errs = append(errs, err.Error())
			p.written = nil
		} else {
			p.written, p.rules = &w, rules
		}
	}
	p.synced, p.health = true, health
	if p.written != nil {
		p.gwUp = gwUp
	}
	p.sizeUnderlay(slices.Collect(maps.Keys(w.peers)))
	if pr := p.prober.Load(); pr != nil {
		pr.SetTargets(targets)
	}
	msg := strings.Join(errs, "; ")
	if msg != p.syncErr {
		if msg != "" {
			p.log.Warn("packet mode maps incomplete", "err", msg)
		}
		p.syncErr = msg
	}
}

// sizeUnderlay sizes the programs for the underlay toward peers, the peer
// gateways' addresses (mu held): packet.underlay-mtu when it is set, else
// the smallest MTU of the routes to them (docs/packet.md, "MTU"). It runs
// at every sync, since routes and devices change under a running gateway;
// the choice is logged when it changes and exported as
// strait_packet_underlay_mtu.
func (p *packetPlane) sizeUnderlay(peers []netip.Addr) {
	conf := p.g.cfg.Packet.UnderlayMTU
	path, ok, rerr := packet.UnderlayPathMTU(peers)
	if e := fmt.Sprint(rerr); rerr != nil && e != p.mtuErr {
		p.log.Warn("packet mode: no route to a peer gateway to size the underlay by", "err", rerr)
		p.mtuErr = e
	} else if rerr == nil {
		p.mtuErr = ""
	}
	mtu, from := conf, "packet.underlay-mtu"
	switch {
	case conf != 0:
	case !ok:
		return // no route to any peer yet: the programs keep their size
	default:
		mtu, from = path.MTU, "route to "+path.Peer.String()+" via "+path.Device
	}
	said := fmt.Sprintf("%d from %s", mtu, from)
	if conf != 0 && ok && conf > path.MTU {
		said += fmt.Sprintf("; larger than the %s: tunnel packets that do not fit it are fragmented on the underlay", path)
	}
	if err := p.dp.SetUnderlayMTU(mtu); err != nil {
		said = "error: " + err.Error()
		if said != p.mtuSaid {
			p.log.Warn("packet mode: underlay MTU not applied", "mtu", mtu, "from", from, "err", err)
		}
		p.mtuSaid = said
		return
	}
	if said != p.mtuSaid {
		attrs := []any{"mtu", mtu, "mss", (&packet.Config{UnderlayMTU: mtu}).MSS(), "from", from}
		lvl := slog.LevelInfo
		if conf != 0 && ok && conf > path.MTU {
			// Tunnel packets that do not fit the route are fragmented on
			// the underlay: slower, not lost.
			lvl = slog.LevelWarn
			attrs = append(attrs, "larger-than", path.String())
		}
		p.log.Log(context.Background(), lvl, "packet mode: underlay MTU", attrs...)
		p.mtuSaid = said
	}
}

// peerMSS is the MSS for the SYNs of flows through peer gateway ip: sized
// for this node's route to it, so that a peer behind a 9000-byte path is
// not held to a 1500-byte one's size (docs/packet.md, "MTU"); 0 (the
// programs' MSS, for the narrowest route) when packet.underlay-mtu is set
// or the route is unknown. Read at every sync, as the routes change.
func (p *packetPlane) peerMSS(ip netip.Addr) uint16 {
	if p.g.cfg.Packet.UnderlayMTU != 0 {
		return 0
	}
	r, err := packet.RouteMTU(ip)
	if err != nil {
		return 0 // sizeUnderlay logs it
	}
	return packet.MSSFor(r.MTU)
}

// packetPeerAddrs are the underlay addresses of the gateways of every
// peer in the packet mode, as their Peer resources list them.
func (g *Gateway) packetPeerAddrs() []netip.Addr {
	var out []netip.Addr
	for _, id := range g.packetPeers() {
		r, ok := g.store.Set().Get(catalog.Key{Kind: catalog.KindPeer, Name: id})
		if !ok {
			continue
		}
		gws, err := underlay(r.(*catalog.Peer))
		if err != nil {
			continue
		}
		for _, a := range gws {
			out = append(out, a)
		}
	}
	return out
}

// transition logs, counts and remembers a peer's change of mode: a
// refusal once per reason, not once per offer.
func (p *packetPlane) transition(id string, pp *packetPeer, active bool) {
	if active && !pp.active {
		p.log.Info("packet mode active", "peer", id, "imports", pp.answer == DataPlanePacket, "exports", pp.heard != nil)
		pp.logged = ""
	}
	if !active && pp.reason != "" && pp.reason != pp.logged {
		p.g.metrics.packetRefusals.WithLabelValues(id).Inc()
		p.log.Warn("packet mode refused; the stream mode carries this peer", "peer", id, "reason", pp.reason)
		pp.logged = pp.reason
	}
	pp.active = active
}

// packetWant is what the maps are to hold.
type packetWant struct {
	tables  []packetTableSpec
	imports map[packet.Service]packet.Import
	exports map[packet.Service]packet.Export
	peers   map[netip.Addr]packet.Peer
	policy  map[packet.PolicyKey]packet.Verdict
}

type packetTableSpec struct {
	table *ring.Table
	addrs map[string]netip.Addr
	key   string // members, addresses and the dead ones: equal keys, equal buckets
}

// same reports whether w holds what o does, so that an unchanged state
// costs no map writes (sync runs every packetHelloInterval).
func (w *packetWant) same(o *packetWant) bool {
	if o == nil || len(w.tables) != len(o.tables) {
		return false
	}
	for i := range w.tables {
		if w.tables[i].key != o.tables[i].key {
			return false
		}
	}
	return maps.Equal(w.imports, o.imports) && maps.Equal(w.exports, o.exports) &&
		maps.Equal(w.peers, o.peers) && maps.Equal(w.policy, o.policy)
}

// write fills the maps in the order State.Apply does: tables first and
// imports last, so that no import points at a table not yet written. What
// equals old (what this process wrote last, nil: nothing known) is not
// written again: a health change rewrites one table and the peers.
func (w *packetWant) write(dp *packet.Datapath, old *packetWant) error {
	for i := range dp.Tables() {
		if old != nil && (i >= len(w.tables) && i >= len(old.tables) ||
			i < len(w.tables) && i < len(old.tables) && w.tables[i].key == old.tables[i].key) {
			continue
		}
		var err error
		if i < len(w.tables) {
			err = dp.SetTable(i, w.tables[i].table, w.tables[i].addrs)
		} else {
			err = dp.SetTable(i, nil, nil)
		}
		if err != nil {
			return err
		}
	}
	if old == nil || !maps.Equal(w.peers, old.peers) {
		if err := dp.SetPeers(w.peers); err != nil {
			return err
		}
	}
	if old == nil || !maps.Equal(w.policy, old.policy) {
		if err := dp.SetPolicy(w.policy); err != nil {
			return err
		}
	}
	if old == nil || !maps.Equal(w.exports, old.exports) {
		if err := dp.SetExports(w.exports); err != nil {
			return err
		}
	}
	if old == nil || !maps.Equal(w.imports, old.imports) {
		return dp.SetImports(w.imports)
	}
	return nil
}

// underlay returns a peer's gateways (as the Peer resource lists them,
// the pool's names for them) and their IPv4 underlay addresses.
func underlay(pr *catalog.Peer) (map[string]netip.Addr, error) {
	out := map[string]netip.Addr{}
	for _, gw := range pr.Spec.Gateways {
		a, err := underlayAddr(gw)
		if err != nil {
			return nil, fmt.Errorf("peer %s: %w", pr.Metadata.Name, err)
		}
		out[gw] = a
	}
	return out, nil
}

// underlayAddr is a gateway's IPv4 underlay address, from its host:port or
// host as a Peer resource lists it.
func underlayAddr(gw string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(gw)
	if err != nil {
		host = gw
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Unmap().Is4() {
		return netip.Addr{}, fmt.Errorf("gateway %q: the packet mode needs an IPv4 address, not a name (its tunnel packets are accepted by source address)", gw)
	}
	return a.Unmap(), nil
}

// maxPacketRings bounds the Maglev tables kept (each of ring.DefaultSize
// buckets): one per member set in use, a few peers' worth.
const maxPacketRings = 16

// packetTable is a peer's Maglev table with its dead gateways' buckets
// given to heirs, as the pool's own view does.
// Tables already built for a member set come from rings (nil: none kept):
// a health change then costs the WithDown view alone, not a new table of
// ring.DefaultSize buckets.
func packetTable(gws map[string]netip.Addr, live map[string]bool, rings map[string]*ring.Table) (packetTableSpec, error) {
	names := make([]string, 0, len(gws))
	for n := range gws {
		names = append(names, n)
	}
	slices.Sort(names)
	members := strings.Join(names, " ")
	t := rings[members]
	if t == nil {
		var err error
		if t, err = ring.New(names, ring.Options{}); err != nil {
			return packetTableSpec{}, err
		}
		if rings != nil {
			if len(rings) >= maxPacketRings {
				clear(rings) // member sets changed often: keep the memory bounded
			}
			rings[members] = t
		}
	}
	down := packetDown(gws, live)
	var key strings.Builder
	for _, n := range names {
		fmt.Fprintf(&key, "%s=%s/%v ", n, gws[n], down[n])
	}
	return packetTableSpec{table: t.WithDown(down), addrs: gws, key: key.String()}, nil
}

// packetDown is the set of a peer's gateways taken out: those live says
// dead (packetLiveness: by their programs' answers to the probes, or by
// their sessions when they never answered). When all of a peer's
// gateways look dead, none is taken out, since sending to them is then no
// worse than dropping, and it keeps the flows of a peer whose only gateway
// restarts while judged by its sessions (docs/packet.md, "Health").
func packetDown(gws map[string]netip.Addr, live map[string]bool) map[string]bool {
	down := map[string]bool{}
	if live == nil {
		return down
	}
	for n := range gws {
		if !live[n] {
			down[n] = true
		}
	}
	if len(down) == len(gws) {
		return map[string]bool{}
	}
	return down
}

// packetImportCluster is the cluster whose table carries an import of the
// source clusters cs (in order of preference) in the packet mode: the
// first whose gateways are not all dead, else the first — the stream
// mode's choice too (egress.go tries the clusters in order and moves on
// only when a cluster has no live gateway). ok is false when some source
// cluster has no table (not in the packet mode, or no room): the whole
// import then stays on streams, which alone can reach that cluster.
// skipped are the dead clusters passed over for c.
func packetImportCluster(cs []string, slots map[string]uint32, dead map[string]bool) (c string, ok bool, skipped []string) {
	if len(cs) == 0 {
		return "", false, nil
	}
	for _, id := range cs {
		if _, has := slots[id]; !has {
			return "", false, nil
		}
	}
	for i, id := range cs {
		if !dead[id] {
			return id, true, cs[:i]
		}
	}
	return cs[0], true, nil
}

// allDead reports whether live says every one of gws is dead (nil: no
// verdict yet, none is).
func allDead(gws map[string]netip.Addr, live map[string]bool) bool {
	if live == nil || len(gws) == 0 {
		return false
	}
	for n := range gws {
		if live[n] {
			return false
		}
	}
	return true
}

// packetSources turns wire sources into policy sources; IPv6 ones hold no
// address the packet mode carries.
func packetSources(ws []packetSourceW) []packet.Source {
	var out []packet.Source
	for _, s := range ws {
		pr, err := netip.ParsePrefix(s.CIDR)
		if err != nil || !pr.Addr().Unmap().Is4() {
			continue
		}
		out = append(out, packet.Source{Prefix: pr, Namespace: s.Namespace, Labels: s.Labels})
	}
	return out
}

// status is every configured or heard peer's data-plane mode.
func (p *packetPlane) status() []PeerDataPlane {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := map[string]bool{}
	for id := range p.g.cfg.Peers {
		ids[id] = true
	}
	for _, r := range p.g.store.Set().List(catalog.KindPeer) {
		if pr := r.(*catalog.Peer); pr.Spec.DataPlane != "" && pr.Metadata.Name != p.g.cfg.Cluster {
			ids[pr.Metadata.Name] = true
		}
	}
	for id, pp := range p.peers {
		if pp.asked != "" || pp.answer != "" {
			ids[id] = true
		}
	}
	var out []PeerDataPlane
	for id := range ids {
		pp := p.peer(id)
		mode, why := p.g.dataPlane(id)
		s := PeerDataPlane{Cluster: id, Configured: mode, Peer: pp.answer, Active: pp.active, Reason: pp.reason}
		switch {
		case why != "":
			s.Reason = why
		case mode == DataPlanePacket && p.dp == nil && p.attachErr != "":
			s.Reason = p.attachErr
		}
		if s.Active {
			s.Imports, s.Exports = pp.answer == DataPlanePacket, pp.heard != nil
		}
		if s.Configured == DataPlaneStream && pp.asked == DataPlanePacket {
			s.Peer = pp.asked
			s.Reason = "the peer offers the packet mode; this gateway's configuration says stream for it"
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// packetCollector exports the programs' counters on /metrics.
type packetCollector struct{ p *packetPlane }

var (
	descPktPackets = prometheus.NewDesc("strait_packet_packets_total", "Packets the packet mode's programs carried, by direction (docs/packet.md, Counters).", []string{"direction"}, nil)
	descPktDrops   = prometheus.NewDesc("strait_packet_drops_total", "Packets the packet mode's programs dropped, by reason.", []string{"reason"}, nil)
	descPktEvents  = prometheus.NewDesc("strait_packet_events_total", "Other events of the packet mode's programs: flows placed, repinned, SYNs clamped, fragments seen.", []string{"event"}, nil)
	descPktRule    = prometheus.NewDesc("strait_packet_policy_drops_total", "New flows the packet mode's policy map denied, by deciding AccessPolicy (\"\" is the default deny).", []string{"policy"}, nil)
	descPktActive  = prometheus.NewDesc("strait_packet_peer_active", "1 while the packet mode carries the peer's traffic, 0 while the stream mode does.", []string{"peer"}, nil)
	descPktGwUp    = prometheus.NewDesc("strait_packet_gateway_up", "1 while the packet mode's maps send new flows to the peer gateway, 0 while they take it out as dead (docs/packet.md, Health).", []string{"peer", "gateway"}, nil)
	descPktAnswers = prometheus.NewDesc("strait_packet_probe_answers_total", "Answers of the peer gateway's programs to this gateway's liveness probes.", []string{"peer", "gateway"}, nil)
	descPktDowns   = prometheus.NewDesc("strait_packet_probe_downs_total", "Times the liveness probes found the peer gateway's programs silent.", []string{"peer", "gateway"}, nil)
	descPktLate    = prometheus.NewDesc("strait_packet_probe_late_rounds_total", "Probe rounds that ran late (this process stalled for more than two intervals) and so judged nothing.", nil, nil)
	descPktFlows   = prometheus.NewDesc("strait_packet_flow_map_entries", "Import flows the packet mode's flow map holds, as counted up to 10 s before the scrape; at strait_packet_flow_map_size it evicts the least recently used for each new flow (docs/packet.md, A full flow map).", nil, nil)
	descPktFlowMax = prometheus.NewDesc("strait_packet_flow_map_size", "Import flows the packet mode's flow map can hold (packet.flow-entries).", nil, nil)
	descPktMTU     = prometheus.NewDesc("strait_packet_underlay_mtu", "The underlay MTU the packet mode's programs are sized for: packet.underlay-mtu, else the smallest MTU of the routes to the peer gateways (docs/packet.md, MTU).", nil, nil)
)

func (c packetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPktPackets, descPktDrops, descPktEvents, descPktRule, descPktActive, descPktGwUp, descPktAnswers, descPktDowns, descPktLate, descPktMTU, descPktFlows, descPktFlowMax} {
		ch <- d
	}
}

func (c packetCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	for _, s := range p.status() {
		v := 0.0
		if s.Active {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descPktActive, prometheus.GaugeValue, v, s.Cluster)
	}
	// Counting the flow map costs a system call per 4096 entries (per
	// entry on a kernel without batch reads): not under the plane's lock,
	// which health changes wait for, and at most once per flowMapRefresh.
	// The datapath is closed only when the gateway stops.
	p.mu.Lock()
	dp := p.dp
	p.mu.Unlock()
	if dp != nil {
		if n, size, err := p.flowCount.read(dp); err != nil {
			p.log.Warn("packet flow map", "err", err)
		} else {
			ch <- prometheus.MustNewConstMetric(descPktFlows, prometheus.GaugeValue, float64(n))
			ch <- prometheus.MustNewConstMetric(descPktFlowMax, prometheus.GaugeValue, float64(size))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dp == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descPktMTU, prometheus.GaugeValue, float64(p.dp.UnderlayMTU()))
	pr := p.prober.Load()
	if pr != nil {
		ch <- prometheus.MustNewConstMetric(descPktLate, prometheus.CounterValue, float64(pr.LateRounds()))
	}
	for peer, gws := range p.gwUp {
		for gw, up := range gws {
			v := 0.0
			if up {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descPktGwUp, prometheus.GaugeValue, v, peer, gw)
			if a, err := underlayAddr(gw); err == nil && pr != nil {
				if st, ok := pr.State(a); ok {
					ch <- prometheus.MustNewConstMetric(descPktAnswers, prometheus.CounterValue, float64(st.Answers), peer, gw)
					ch <- prometheus.MustNewConstMetric(descPktDowns, prometheus.CounterValue, float64(st.Downs), peer, gw)
				}
			}
		}
	}
	counters, err := p.dp.Counters()
	if err != nil {
		p.log.Warn("packet counters", "err", err)
		return
	}
	for name, v := range counters {
		desc, label := descPktEvents, name
		switch {
		case strings.HasSuffix(name, "_packets"):
			desc, label = descPktPackets, strings.TrimSuffix(name, "_packets")
		case strings.HasSuffix(name, "_drops"):
			desc, label = descPktDrops, strings.TrimSuffix(name, "_drops")
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), label)
	}
	if drops, err := p.dp.RuleDrops(len(p.rules)); err == nil {
		for i, n := range drops {
			ch <- prometheus.MustNewConstMetric(descPktRule, prometheus.CounterValue, float64(n), p.rules[i])
		}
	}
}
