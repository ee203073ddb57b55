package gateway

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/fabric"
)

const goodConfig = "cluster: a\nidentity: {dir: fabric}\n"

func writeConfig(t testing.TB, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // in the error
	}{
		{"empty cluster", "identity: {dir: x}\n", `cluster "": must be a DNS label`},
		{"bad cluster", "cluster: Cluster_A\nidentity: {dir: x}\n", `cluster "Cluster_A": must be a DNS label`},
		{"no identity", "cluster: a\n", "identity: set dir, or all of cert, key and ca"},
		{"partial identity", "cluster: a\nidentity: {cert: a.crt, key: a.key}\n", "identity: set dir"},
		{"listen without port", goodConfig + "listen: 10.0.0.1\n", `listen "10.0.0.1": want host:port`},
		{"listen port out of range", goodConfig + "listen: \":99999\"\n", `listen ":99999": want host:port`},
		{"listen port not a number", goodConfig + "listen: \"10.0.0.1:gw\"\n", `listen "10.0.0.1:gw": want host:port`},
		{"dns without port", goodConfig + "dns: 127.0.0.1\n", `dns "127.0.0.1": want host:port`},
		{"metrics garbage", goodConfig + "metrics: \"[::1\"\n", `metrics "[::1": want host:port`},
		{"bad cidr", goodConfig + "sources: [{cidr: 10.0.0.0/33}]\n", `sources[0].cidr "10.0.0.0/33": not a CIDR prefix`},
		{"bad transport", goodConfig + "transport: sctp\n", `transport "sctp": must be tls or quic`},
		{"bad congestion", goodConfig + "congestion: cu bic\n", `congestion: congestion control name "cu bic": want letters, digits`},
		{"bad lan congestion", goodConfig + "lan-congestion: a_name_too_long_16\n", `lan-congestion: congestion control name "a_name_too_long_16": want 1 to 15 bytes`},
		{"bad intercept", goodConfig + "intercept: tproxy\n", `intercept "tproxy": must be auto, steer or listeners`},
		{"admin path too long", goodConfig + "admin: /run/" + strings.Repeat("x", 100) + ".sock\n", "bytes, but a Unix socket path holds at most 107; choose a shorter path"},
		{"address not cidr", goodConfig + "sources: [{cidr: 10.0.0.0/8}, {cidr: 10.1.2.3}]\n", `sources[1].cidr "10.1.2.3": not a CIDR prefix`},
		{"bad source namespace", goodConfig + "sources: [{cidr: 10.0.0.0/8, namespace: Web}]\n", `sources[0].namespace "Web": must be a DNS label`},
		{"preconnect", goodConfig + "preconnect: 65\n", "preconnect 65: must be -1 (off), 0 (default 2) or up to 64"},
		{"preconnect negative", goodConfig + "preconnect: -2\n", "preconnect -2"},
		{"sessions", goodConfig + "sessions: 17\n", "sessions 17: must be 0 (default 8) to 16"},
		{"keepalive", goodConfig + "keepalive-timeout: -1s\n", "keepalive-timeout -1s: must not be negative"},
		{"keepalive below the probe interval", goodConfig + "probe-interval: 300ms\nkeepalive-timeout: 200ms\n", "keepalive-timeout 200ms: must exceed the probe interval 300ms"},
		{"probe interval over the default keepalive timeout", goodConfig + "probe-interval: 1s\n", "probe-interval 1s: must be below keepalive-timeout, which defaults to 1s"},
		{"probe interval negative", goodConfig + "probe-interval: -1ms\n", "probe-interval -1ms: must be 0 (default 10ms) up to 10s"},
		{"probe interval tiny", goodConfig + "probe-interval: 10us\n", "probe-interval 10µs: must be at least 100us"},
		{"probe misses", goodConfig + "probe-misses: -2\n", "probe-misses -2: must be 0 (default 10) to 1000"},
		{"health address", goodConfig + "health: nowhere\n", "health \"nowhere\": want host:port"},
		{"udp idle negative", goodConfig + "udp: {idle-timeout: -1s}\n", "udp.idle-timeout -1s: must be 0 (default 30s) or positive"},
		{"udp idle tiny", goodConfig + "udp: {idle-timeout: 1ms}\n", "udp.idle-timeout 1ms: must be at least 100ms"},
		{"udp queue below a datagram", goodConfig + "udp: {queue-bytes: 1000}\n", "udp.queue-bytes 1000: must be 0 (default 262144) or 65537 to 67108864"},
		{"udp queue huge", goodConfig + "udp: {queue-bytes: 1000000000}\n", "udp.queue-bytes 1000000000"},
		{"udp import rate low", goodConfig + "udp: {import-rate: 99}\n", "udp.import-rate 99: must be 0 (default 200000) or 100 to 10000000 datagrams per second"},
		{"udp import rate negative", goodConfig + "udp: {import-rate: -1}\n", "udp.import-rate -1"},
		{"udp flows", goodConfig + "udp: {max-flows: -1}\n", "udp.max-flows -1: must be 0 (default 8192) to 1048576"},
		{"max streams", goodConfig + "max-streams: -1\n", "max-streams -1: must be 0 (default: from RLIMIT_NOFILE) or more"},
		{"udp unknown field", goodConfig + "udp: {timeout: 1s}\n", "field timeout not found"},
		{"keepalive not a duration", goodConfig + "keepalive-timeout: soon\n", "line 3: cannot unmarshal !!str `soon` into time.Duration"},
		{"unknown field", goodConfig + "lisen: :4443\n", "field lisen not found"},
		{"unknown nested field", "cluster: a\nidentity: {dir: x, certificate: y}\n", "field certificate not found"},
		{"wrong type", goodConfig + "sources: {cidr: 10.0.0.0/8}\n", "cannot unmarshal"},
		{"syntax", "cluster: [a\n", "gateway.yaml"},
		{"empty file", "", "empty: want a YAML mapping"},
		{"only a comment", "# nothing yet\n", "empty: want a YAML mapping"},
		{"two documents", goodConfig + "---\ncluster: B\n", "more than one YAML document"},
		{"bad second document", goodConfig + "---\n[\n", "more than one YAML document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), tt.yaml)
			_, err := LoadConfig(path)
			if err == nil {
				t.Fatalf("LoadConfig succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, `cluster: a
identity: {dir: fabric}
listen: 10.0.0.1:4443
admin: run/gw.sock
state: state/a.json
dns: 127.0.0.1:5353
metrics: "[::1]:9464"
sources:
  - {cidr: 10.1.0.0/16, namespace: web, labels: {app: web}}
  - {cidr: "10.0.0.0/8"}
  - {cidr: "fd00::/8", namespace: v6}
resources: [exports.yaml, /etc/strait/x.yaml]
preconnect: -1
sessions: 4
keepalive-timeout: 2s
`)
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{
		"identity.dir": c.Identity.Dir, "state": c.State, "admin": c.Admin,
		"resources[0]": c.Resources[0], "resources[1]": c.Resources[1],
	} {
		want := map[string]string{
			"identity.dir": filepath.Join(dir, "fabric"), "state": filepath.Join(dir, "state/a.json"),
			"admin": filepath.Join(dir, "run/gw.sock"), "resources[0]": filepath.Join(dir, "exports.yaml"),
			"resources[1]": "/etc/strait/x.yaml",
		}[name]
		if got != want {
			t.Errorf("%s = %q, want %q (relative to the file)", name, got, want)
		}
	}
	if c.KeepaliveTimeout != 2*time.Second || c.preconnect() != 0 || c.Sessions != 4 {
		t.Errorf("keepalive %v, preconnect %d, sessions %d", c.KeepaliveTimeout, c.preconnect(), c.Sessions)
	}
	for _, tt := range []struct {
		addr   string
		ns     string
		labels map[string]string
	}{
		{"10.1.2.3", "web", map[string]string{"app": "web"}},
		{"::ffff:10.1.2.3", "web", map[string]string{"app": "web"}}, // v4-mapped, as a dual-stack listener sees it
		{"10.2.0.1", DefaultNS, nil},
		{"fd01::1", "v6", nil},
		{"192.168.0.1", DefaultNS, nil},
	} {
		ns, labels := c.source(netip.MustParseAddr(tt.addr))
		if ns != tt.ns || labels["app"] != tt.labels["app"] {
			t.Errorf("source(%s) = %s %v, want %s %v", tt.addr, ns, labels, tt.ns, tt.labels)
		}
	}

	// Document markers around the one document are fine.
	for _, in := range []string{"---\n" + goodConfig, goodConfig + "---\n", goodConfig + "---\n# later\n", goodConfig + "...\n"} {
		if _, err := LoadConfig(writeConfig(t, dir, in)); err != nil {
			t.Errorf("LoadConfig(%q): %v", in, err)
		}
	}

	// Defaults.
	c, err = LoadConfig(writeConfig(t, dir, goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.listen() != DefaultListen || c.admin() != DefaultAdmin || c.state() != "/var/lib/strait/gateway-a.json" || c.preconnect() != defaultPrecon {
		t.Errorf("defaults: listen %q admin %q state %q preconnect %d", c.listen(), c.admin(), c.state(), c.preconnect())
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("LoadConfig of a missing file succeeded")
	}
}

// TestNewIdentityMismatch: a certificate issued for cluster c, configured
// as cluster b, is refused at start, naming both.
func TestNewIdentityMismatch(t *testing.T) {
	dir := t.TempDir()
	if _, err := fabric.InitDir(dir, "cs", time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.IssueFiles(dir, "", "c", 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Cluster: "b", State: filepath.Join(dir, "b.json"),
		Identity: IdentityFiles{Cert: filepath.Join(dir, "c.crt"), Key: filepath.Join(dir, "c.key"), CA: filepath.Join(dir, "ca.crt")}}
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), `certificate is for cluster "c", configured cluster is "b"`) {
		t.Fatalf("New with cluster b and c's certificate: %v", err)
	}
	cfg.Cluster = "c"
	if _, err := New(cfg); err != nil {
		t.Fatalf("New with the matching cluster: %v", err)
	}
	// A resource file that does not parse stops New.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Peer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Resources = []string{bad}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("New with a bad resource file: %v", err)
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte("cluster: a\nidentity: {cert: c, key: k, ca: ca}\nlisten: \":1\"\nsources: [{cidr: 10.0.0.0/8, namespace: x, labels: {a: b}}]\nkeepalive-timeout: 1s\n"))
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nresources: [a, /b]\npreconnect: 64\nsessions: 16\n"))
	f.Add([]byte("cluster: [a\n"))
	// Edges: nothing, numbers and durations past their types, negative
	// ones, invalid UTF-8.
	f.Add([]byte{})
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nlisten: \":99999\"\npreconnect: 99999999999999999999\nsessions: 9223372036854775808\nkeepalive-timeout: 9999999999h\nprobe-interval: 9223372036854775808ns\n"))
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nlisten: \":-1\"\npreconnect: -1\nsessions: -16\nkeepalive-timeout: -1s\nprobe-interval: -5ms\n"))
	f.Add([]byte("cluster: \xff\xfe\nidentity: {dir: /\xc3}\nsources: [{cidr: 10.0.0.0/99, namespace: x}]\n"))
	// UDP: the defaults, the bounds, one past each, and past the types.
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nudp: {idle-timeout: 30s, queue-bytes: 262144, max-flows: 8192, import-rate: 20000}\n"))
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nudp: {idle-timeout: 100ms, queue-bytes: 65537, max-flows: 1048576, import-rate: 10000000}\n"))
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nudp: {idle-timeout: 99ms, queue-bytes: 65536, max-flows: 1048577}\n"))
	f.Add([]byte("cluster: a\nidentity: {dir: /x}\nudp: {idle-timeout: -9223372036854775808ns, queue-bytes: 9223372036854775807, max-flows: -1}\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil {
			return
		}
		// Whatever loads is valid, and stays valid when validated again
		// (New validates its copy).
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded config fails Validate: %v", err)
		}
		for _, p := range append([]string{c.Identity.Dir, c.State, c.Admin}, c.Resources...) {
			if p != "" && !filepath.IsAbs(p) {
				t.Fatalf("path %q left relative", p)
			}
		}
		for _, s := range c.Sources {
			if !s.prefix.IsValid() {
				t.Fatalf("source %q without a parsed prefix", s.CIDR)
			}
		}
	})
}
