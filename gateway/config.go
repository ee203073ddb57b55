package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strait-net/strait/internal/dnsname"
	"github.com/strait-net/strait/internal/strictyaml"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/wancc"
)

// Config is a gateway's configuration file.
//
//	cluster: a                        # this cluster's ID, as in its certificate
//	identity: {dir: /etc/strait}      # a.crt, a.key, ca.crt from `strait fabric issue`
//	listen: 0.0.0.0:4443              # where peer gateways connect
//	admin: /run/strait/gateway.sock   # local admin API (strait apply/get/delete)
//	state: /var/lib/strait/a.json     # resources survive restarts here
//	dns: 127.0.0.1:5353               # clusterset.local DNS ("" = off)
//	metrics: 127.0.0.1:9464           # Prometheus /metrics ("" = off)
//	intercept: auto                   # imports: steer (sk_lookup), listeners, or auto
//	sources:                          # who a client address is, for policies (after Workloads)
//	  - {cidr: 10.0.0.0/8, namespace: default, labels: {app: web}}
//	resources: [exports.yaml]         # applied at start, before the admin API opens
//	udp: {idle-timeout: 30s, queue-bytes: 262144, max-flows: 8192, import-rate: 200000}   # the defaults
//	peers: {b: {data-plane: packet}}  # per peer cluster; data-plane stream (default) or packet
//	packet: {lan: eth1, snat: 10.2.0.254}   # this node's packet mode (packetmode.go)
//	max-streams: 0                    # connections carried at once (0: from RLIMIT_NOFILE)
type Config struct {
	Cluster   string        `yaml:"cluster"`
	Identity  IdentityFiles `yaml:"identity"`
	Listen    string        `yaml:"listen"`
	Admin     string        `yaml:"admin"`
	State     string        `yaml:"state"`
	DNS       string        `yaml:"dns"`
	Metrics   string        `yaml:"metrics"`
	Sources   []Source      `yaml:"sources"`
	Resources []string      `yaml:"resources"`
	// Transport carries sessions between gateways: "tls" (TLS 1.3 over TCP
	// with strait's multiplexer, the default) or "quic". Measured here: QUIC
	// fell to 22–77 Mbit/s at 0.08 % loss where TLS kept 900+, and moved a
	// third of TLS's bytes per CPU second; every gateway of a clusterset must
	// use the same.
	Transport string `yaml:"transport"`
	// Congestion is the TCP congestion control of WAN sockets: "" means
	// strait's own, which takes a loss without a queue for random loss
	// (cubic where the kernel cannot load it; docs/congestion.md), until a
	// session carries bulk data over a path that loses it, then bbr (where
	// the kernel has it; see tunnel.Config.Congestion for why); "cubic" or
	// "bbr" that algorithm from the start, "system" the kernel default.
	Congestion string `yaml:"congestion"`
	// LANCongestion is the TCP congestion control of the gateway's LAN
	// sockets: clients' connections to an import, connections to an
	// export's targets. "" means strait's own without the WAN's least
	// jitter allowance, so that a lossy edge LAN's random loss costs an
	// eighth while a switch's shallow queue still counts as congestion
	// (the kernel default where it cannot load; docs/congestion.md);
	// "system" the kernel default, or a kernel algorithm by name.
	LANCongestion string `yaml:"lan-congestion"`
	// Preconnect is how many idle connections the gateway keeps open to
	// each export's target, so a new stream does not wait for a TCP
	// handshake with the service. 0 means 2; -1 turns it off, for a
	// service that serves one connection at a time and more than this
	// gateway connect to (README, "Preconnected target connections").
	Preconnect int `yaml:"preconnect"`
	// Sessions is the number of warm sessions (TCP connections) to each
	// peer gateway, 0 for the tunnel's default of 8: under loss each
	// carries only so many small requests a second (tunnel.PoolConfig.
	// SessionsPerAddr, README "Many small requests over a lossy WAN").
	Sessions int `yaml:"sessions"`
	// KeepaliveTimeout is how long a silent peer gateway's sessions live
	// (0: 1s). Health takes a silent gateway out of the table much sooner
	// (ProbeInterval × ProbeMisses) without closing its streams, so this
	// only bounds how long a dead peer's sessions hold memory.
	KeepaliveTimeout time.Duration `yaml:"keepalive-timeout"`
	// ProbeInterval is how often each session this gateway dialed to a
	// peer gateway pings it unless something else arrived in the interval
	// (data is proof of life too; the peer only answers), and how often
	// the gateway checks that every peer gateway answered
	// (0: 10ms). A gateway that killed -9 is seen at once (its sessions
	// end); one that falls silent is taken out of the table after
	// ProbeMisses intervals, and its flows move to the others.
	ProbeInterval time.Duration `yaml:"probe-interval"`
	// ProbeMisses is how many silent probe intervals make a peer gateway
	// dead (0: 10). A killed gateway does not need them (its sessions end
	// at once); they are for a machine or link that dies without a word.
	// 3 (30 ms) took live gateways out hundreds of times per run on the
	// loaded 2-core lab host (docs/failover.md, "Health").
	ProbeMisses int `yaml:"probe-misses"`
	// Health is a UDP address ("" = off) where the gateway answers health
	// probes (package health), so that whatever spreads local clients over
	// the cluster's gateways (e.g. a resilient nexthop group) can drop a
	// dead one.
	Health string `yaml:"health"`
	// Intercept is how the gateway receives its imports' connections:
	// "steer" gives every IPv4 import address:port to one listener with an
	// eBPF sk_lookup program (needs CAP_BPF and CAP_NET_ADMIN; an import
	// costs a map entry), "listeners" opens a listening socket per import
	// address:port, "auto" (the default) steers where the program loads
	// and falls back to listeners with a warning where it does not.
	Intercept string `yaml:"intercept"`
	// UDP bounds the UDP flows of import ports with protocol UDP (udp.go).
	UDP UDPConfig `yaml:"udp"`
	// Peers holds per-peer settings by peer cluster ID; the Peer resources
	// still say where each peer's gateways are. See PeerConfig.
	Peers map[string]PeerConfig `yaml:"peers"`
	// Packet configures this node's packet mode, needed when a peer's
	// data-plane is packet (docs/packet.md).
	Packet PacketConfig `yaml:"packet"`
	// MaxStreams bounds the TCP connections the gateway carries at once,
	// client connections at its imports and target connections of
	// incoming streams together (limit.go); past it new ones are reset
	// at once and counted in strait_connections_refused_total. 0 means
	// half of RLIMIT_NOFILE, at most 65536 (README, "Concurrency limits").
	MaxStreams int `yaml:"max-streams"`

	Logger *slog.Logger `yaml:"-"`
}

// IdentityFiles locate the gateway's certificate, key and fabric CA.
type IdentityFiles struct {
	Dir  string `yaml:"dir"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// Source names the workloads behind client addresses; a connection's source
// namespace and labels, which policies match, come from the Workload
// resource holding the client's exact address if there is one (the
// Kubernetes controller pushes one per pod), else from the first source
// whose CIDR holds it.
type Source struct {
	CIDR      string            `yaml:"cidr"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`

	prefix netip.Prefix
}

// Intercept modes.
const (
	InterceptAuto      = "auto"
	InterceptSteer     = "steer"
	InterceptListeners = "listeners"
)

// Transports.
const (
	TransportTLS  = "tls"
	TransportQUIC = "quic"
)

// Defaults of Config.
const (
	DefaultListen  = ":4443"
	DefaultAdmin   = "/run/strait/gateway.sock"
	DefaultNS      = "default"
	defaultPrecon  = 2
	defaultStateFn = "/var/lib/strait/gateway-%s.json"
	// defaultProbeInterval is the probe interval, which is also the
	// sessions' keepalive interval: 10 ms × probe-misses is how soon a
	// silent peer gateway leaves the table (docs/failover.md, "Health").
	defaultProbeInterval = 10 * time.Millisecond
	defaultProbeMisses   = 10
	// defaultKeepaliveTimeout is the tunnel's (tunnel.Config), which the
	// gateway keeps when keepalive-timeout is 0.
	defaultKeepaliveTimeout = time.Second
)

// LoadConfig reads a configuration file; relative paths in it are taken
// relative to the file.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := strictyaml.Decode(b, &c); err != nil {
		if errors.Is(err, strictyaml.ErrEmpty) {
			return Config{}, fmt.Errorf("%s: %w with at least cluster and identity", path, err)
		}
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.Identity.Dir, &c.Identity.Cert, &c.Identity.Key, &c.Identity.CA, &c.State, &c.Admin} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i, r := range c.Resources {
		if !filepath.IsAbs(r) {
			c.Resources[i] = filepath.Join(dir, r)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks every field and names the first bad one.
func (c *Config) Validate() error {
	if !dnsname.IsLabel(c.Cluster) {
		return fmt.Errorf("cluster %q: must be a DNS label (the cluster ID in the certificate)", c.Cluster)
	}
	if c.Identity.Dir == "" && (c.Identity.Cert == "" || c.Identity.Key == "" || c.Identity.CA == "") {
		return fmt.Errorf("identity: set dir, or all of cert, key and ca")
	}
	for _, a := range []struct{ field, addr string }{{"listen", c.Listen}, {"dns", c.DNS}, {"metrics", c.Metrics}, {"health", c.Health}} {
		field, addr := a.field, a.addr
		if addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(addr)
		if err == nil {
			_, err = strconv.ParseUint(port, 10, 16)
		}
		if err != nil {
			return fmt.Errorf("%s %q: want host:port (port 0..65535)", field, addr)
		}
	}
	switch c.Transport {
	case "", TransportTLS, TransportQUIC:
	default:
		return fmt.Errorf("transport %q: must be %s or %s", c.Transport, TransportTLS, TransportQUIC)
	}
	for field, name := range map[string]string{"congestion": c.Congestion, "lan-congestion": c.LANCongestion} {
		if name == "" || name == "system" {
			continue
		}
		if err := wancc.CheckName(name); err != nil {
			return fmt.Errorf("%s: %w (cubic, bbr, any the kernel has, or system)", field, err)
		}
	}
	switch c.Intercept {
	case "", InterceptAuto, InterceptSteer, InterceptListeners:
	default:
		return fmt.Errorf("intercept %q: must be %s, %s or %s", c.Intercept, InterceptAuto, InterceptSteer, InterceptListeners)
	}
	if n := len(c.admin()); n > MaxSocketPath {
		return fmt.Errorf("admin %s: %d bytes, but a Unix socket path holds at most %d; choose a shorter path", c.admin(), n, MaxSocketPath)
	}
	if c.Preconnect < -1 || c.Preconnect > 64 {
		return fmt.Errorf("preconnect %d: must be -1 (off), 0 (default %d) or up to 64", c.Preconnect, defaultPrecon)
	}
	if c.Sessions < 0 || c.Sessions > tunnel.MaxSessionsPerAddr {
		return fmt.Errorf("sessions %d: must be 0 (default %d) to %d", c.Sessions, tunnel.DefaultSessionsPerAddr, tunnel.MaxSessionsPerAddr)
	}
	if c.KeepaliveTimeout < 0 {
		return fmt.Errorf("keepalive-timeout %v: must not be negative", c.KeepaliveTimeout)
	}
	if c.ProbeInterval < 0 || c.ProbeInterval > 10*time.Second {
		return fmt.Errorf("probe-interval %v: must be 0 (default %v) up to 10s", c.ProbeInterval, defaultProbeInterval)
	}
	if c.ProbeInterval != 0 && c.ProbeInterval < 100*time.Microsecond {
		return fmt.Errorf("probe-interval %v: must be at least 100us", c.ProbeInterval)
	}
	if c.ProbeMisses < 0 || c.ProbeMisses > 1000 {
		return fmt.Errorf("probe-misses %d: must be 0 (default %d) to 1000", c.ProbeMisses, defaultProbeMisses)
	}
	if c.KeepaliveTimeout != 0 && c.KeepaliveTimeout <= c.probeInterval() {
		return fmt.Errorf("keepalive-timeout %v: must exceed the probe interval %v (0: 1s)", c.KeepaliveTimeout, c.probeInterval())
	}
	// The sessions ping every probe interval, and the tunnel refuses a
	// keepalive timeout that does not exceed its ping interval: say so here,
	// in this file's words, rather than when the first peer is dialed.
	if c.KeepaliveTimeout == 0 && c.probeInterval() >= defaultKeepaliveTimeout {
		return fmt.Errorf("probe-interval %v: must be below keepalive-timeout, which defaults to %v; set keepalive-timeout above it", c.probeInterval(), defaultKeepaliveTimeout)
	}
	if c.MaxStreams < 0 {
		return fmt.Errorf("max-streams %d: must be 0 (default: from RLIMIT_NOFILE) or more", c.MaxStreams)
	}
	if err := c.UDP.Validate(); err != nil {
		return fmt.Errorf("udp.%w", err)
	}
	if err := c.validatePacket(); err != nil {
		return err
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		p, err := netip.ParsePrefix(s.CIDR)
		if err != nil {
			return fmt.Errorf("sources[%d].cidr %q: not a CIDR prefix", i, s.CIDR)
		}
		s.prefix = p.Masked()
		if s.Namespace != "" && !dnsname.IsLabel(s.Namespace) {
			return fmt.Errorf("sources[%d].namespace %q: must be a DNS label", i, s.Namespace)
		}
	}
	return nil
}

func (c *Config) listen() string {
	if c.Listen == "" {
		return DefaultListen
	}
	return c.Listen
}

// MaxSocketPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes, one for the terminating NUL).
const MaxSocketPath = 107

func (c *Config) admin() string {
	if c.Admin == "" {
		return DefaultAdmin
	}
	return c.Admin
}

func (c *Config) state() string {
	if c.State == "" {
		return fmt.Sprintf(defaultStateFn, c.Cluster)
	}
	return c.State
}

func (c *Config) probeInterval() time.Duration {
	if c.ProbeInterval == 0 {
		return defaultProbeInterval
	}
	return c.ProbeInterval
}

// sessionProbeInterval is the stream mode's probe and keepalive interval
// toward a peer whose gateways the packet mode's prober judges
// (packetPlane.setSessionProbes): an eighth of the keepalive timeout
// (125 ms by default), so an idle session still pings after a quarter of
// it without a frame, as at any interval (tunnel's pingRule), and a dead
// gateway's sessions still end within the timeout; never shorter than
// probe-interval.
func (c *Config) sessionProbeInterval() time.Duration {
	timeout := c.KeepaliveTimeout
	if timeout == 0 {
		timeout = defaultKeepaliveTimeout
	}
	return max(c.probeInterval(), timeout/8)
}

func (c *Config) intercept() string {
	if c.Intercept == "" {
		return InterceptAuto
	}
	return c.Intercept
}

func (c *Config) probeMisses() int {
	if c.ProbeMisses == 0 {
		return defaultProbeMisses
	}
	return c.ProbeMisses
}

func (c *Config) maxStreams() int {
	if c.MaxStreams == 0 {
		return defaultMaxStreams()
	}
	return c.MaxStreams
}

func (c *Config) preconnect() int {
	switch c.Preconnect {
	case 0:
		return defaultPrecon
	case -1:
		return 0
	}
	return c.Preconnect
}

// source finds who a client address belongs to.
func (c *Config) source(addr netip.Addr) (string, map[string]string) {
	addr = addr.Unmap()
	for _, s := range c.Sources {
		if s.prefix.Contains(addr) {
			ns := s.Namespace
			if ns == "" {
				ns = DefaultNS
			}
			return ns, s.Labels
		}
	}
	return DefaultNS, nil
}
