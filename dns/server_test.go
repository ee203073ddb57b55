package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// startServer runs a server on a random loopback port until the test ends.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	return s
}

var statusRE = regexp.MustCompile(`status: ([A-Z]+)`)

// TestDig asks the real dig over UDP and TCP.
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("needs dig (apt-get install dnsutils)")
	}
	s := startServer(t, Config{Imports: testImports(t)})
	port := s.Addr().Port()
	tests := []struct {
		name   string
		args   []string
		status string
		flags  []string // header flags that must be present
		ans    []string // answer section, whitespace-normalized
		auth   bool     // SOA in authority
	}{
		{name: "A", args: []string{"myservice.test.svc.clusterset.local", "A"}, status: "NOERROR", flags: []string{"aa"},
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"}},
		{name: "AAAA over TCP", args: []string{"+tcp", "myservice.test.svc.clusterset.local", "AAAA"}, status: "NOERROR",
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN AAAA 2001:db8::1"}},
		{name: "SRV", args: []string{"_https._tcp.myservice.test.svc.clusterset.local", "SRV"}, status: "NOERROR",
			ans: []string{"_https._tcp.myservice.test.svc.clusterset.local. 5 IN SRV 10 100 443 myservice.test.svc.clusterset.local."}},
		{name: "SRV over TCP", args: []string{"+tcp", "_https._tcp.myservice.test.svc.clusterset.local", "SRV"}, status: "NOERROR",
			ans: []string{"_https._tcp.myservice.test.svc.clusterset.local. 5 IN SRV 10 100 443 myservice.test.svc.clusterset.local."}},
		{name: "headless SRV", args: []string{"_https._tcp.headless.test.svc.clusterset.local", "SRV"}, status: "NOERROR",
			ans: []string{
				"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-1.clusterA.headless.test.svc.clusterset.local.",
				"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-2.clusterA.headless.test.svc.clusterset.local.",
				"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-1.clusterB.headless.test.svc.clusterset.local.",
				"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 10-4-0-7.clusterB.headless.test.svc.clusterset.local.",
			}},
		{name: "headless endpoint", args: []string{"my-pet-2.clusterA.headless.test.svc.clusterset.local", "A"}, status: "NOERROR",
			ans: []string{"my-pet-2.clusterA.headless.test.svc.clusterset.local. 5 IN A 10.3.0.101"}},
		{name: "TXT", args: []string{"dns-version.clusterset.local", "TXT"}, status: "NOERROR",
			ans: []string{`dns-version.clusterset.local. 5 IN TXT "1.0.0"`}},
		{name: "NXDOMAIN", args: []string{"nope.test.svc.clusterset.local", "A"}, status: "NXDOMAIN", flags: []string{"aa"}, auth: true},
		{name: "NXDOMAIN over TCP", args: []string{"+tcp", "nope.test.svc.clusterset.local", "A"}, status: "NXDOMAIN", auth: true},
		{name: "NODATA", args: []string{"myservice.test.svc.clusterset.local", "MX"}, status: "NOERROR", auth: true},
		{name: "REFUSED", args: []string{"example.com", "A"}, status: "REFUSED"},
		{name: "no EDNS", args: []string{"+noedns", "myservice.test.svc.clusterset.local", "A"}, status: "NOERROR",
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"}},
		{name: "NOTIMP", args: []string{"+opcode=2", "myservice.test.svc.clusterset.local", "A"}, status: "NOTIMP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"@127.0.0.1", "-p", strconv.Itoa(int(port)), "+tries=1", "+time=2", "+nocookie"}, tt.args...)
			out, err := exec.Command(dig, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			text := string(out)
			if slices.Contains(tt.args, "+tcp") != strings.Contains(text, "(TCP)") {
				t.Errorf("transport: want TCP %v\n%s", slices.Contains(tt.args, "+tcp"), text)
			}
			if m := statusRE.FindStringSubmatch(text); m == nil || m[1] != tt.status {
				t.Fatalf("status %v, want %s\n%s", m, tt.status, text)
			}
			for _, f := range tt.flags {
				if !regexp.MustCompile(`flags:[a-z ]* ` + f + `[ ;]`).MatchString(text) {
					t.Errorf("flag %s missing\n%s", f, text)
				}
			}
			ans := digSection(text, "ANSWER")
			if !slices.Equal(ans, tt.ans) {
				t.Errorf("answer:\n got %q\nwant %q\n%s", ans, tt.ans, text)
			}
			auth := digSection(text, "AUTHORITY")
			if tt.auth != (len(auth) == 1 && strings.Contains(auth[0], " IN SOA ")) {
				t.Errorf("authority %q, want SOA: %v\n%s", auth, tt.auth, text)
			}
			if testing.Verbose() && (tt.name == "SRV" || tt.name == "NXDOMAIN over TCP" || tt.name == "headless SRV") {
				t.Logf("dig %s\n%s", strings.Join(args, " "), text)
			}
		})
	}
}

// digSection returns the records of a dig output section, whitespace
// normalized.
func digSection(out, name string) []string {
	var recs []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, ";; "+name+" SECTION:"):
			in = true
		case in && (line == "" || strings.HasPrefix(line, ";")):
			return recs
		case in:
			recs = append(recs, strings.Join(strings.Fields(line), " "))
		}
	}
	return recs
}

// TestServerTCPAndUDP exchanges with miekg/dns's client, including several
// queries on one TCP connection and truncation then retry over TCP.
func TestServerTCPAndUDP(t *testing.T) {
	var st Static
	big := bigImports(t, 100)
	imp, _ := big.LookupImport("test", "big")
	if err := st.Put("test", "big", imp); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{Imports: &st})
	addr := s.Addr().String()

	m := new(mdns.Msg)
	m.SetQuestion("big.test.svc.clusterset.local.", mdns.TypeA)
	udp := &mdns.Client{Net: "udp", Timeout: 2 * time.Second}
	resp, _, err := udp.Exchange(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Truncated || len(resp.Answer) == 100 {
		t.Fatalf("udp: tc %v with %d answers, want TC and fewer than 100", resp.Truncated, len(resp.Answer))
	}

	conn, err := mdns.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		m.Id = uint16(100 + i)
		if err := conn.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		resp, err := conn.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Id != m.Id || resp.Truncated || len(resp.Answer) != 100 {
			t.Fatalf("tcp query %d: id %d tc %v answers %d, want id %d, no TC, 100", i, resp.Id, resp.Truncated, len(resp.Answer), m.Id)
		}
	}
	stats := s.Stats()
	if stats.Responses != 4 || stats.Truncated != 1 || stats.ByType["A"] != 4 {
		t.Fatalf("stats %+v, want 4 A responses, 1 truncated", stats)
	}
}

func TestServerTCPLimits(t *testing.T) {
	// The first connection must still be open when the second arrives:
	// with a short idle timeout a stall of this process between the two
	// (250 ms was enough against 200) let the server close the first, take
	// the second and reject nothing. The idle close is tested alone below.
	s := startServer(t, Config{MaxTCPConns: 1, TCPIdleTimeout: 2 * patience})
	addr := s.Addr().String()
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	// Wait until the server counts c1 before opening c2.
	waitFor(t, func() bool { return s.tcpConns.Load() == 1 })
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	// The deadlines only bound a hung test: the server closes the
	// connection (EOF or reset), and a read that times out means it did
	// not.
	c2.SetReadDeadline(time.Now().Add(patience))
	if _, err := c2.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second connection over MaxTCPConns=1: %v, want closed by server", err)
	}
	waitFor(t, func() bool { return s.Stats().TCPRejected == 1 })
	if n := s.tcpConns.Load(); n != 1 {
		t.Errorf("%d TCP connections counted after the rejection, want the first one", n)
	}
}

// TestServerTCPIdle: a TCP connection that sends no query is closed after
// TCPIdleTimeout.
func TestServerTCPIdle(t *testing.T) {
	s := startServer(t, Config{TCPIdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(patience))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle connection: %v, want closed by server", err)
	}
	if st := s.Stats(); st.TCPRejected != 0 {
		t.Errorf("the idle close counted as a rejection: %+v", st)
	}
}

// patience bounds waits for what takes milliseconds on a quiet host: a
// hang detector, not a speed requirement.
const patience = 30 * time.Second

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("condition not reached in %v", patience)
}

func TestServerLifecycle(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Addr().IsValid() || s.Addr().Port() == 0 {
		t.Fatalf("addr %v, want a bound port", s.Addr())
	}
	// Same port for UDP and TCP.
	if got := s.udp.LocalAddr().(*net.UDPAddr).AddrPort().Port(); got != s.Addr().Port() {
		t.Fatalf("udp port %d, tcp port %d", got, s.Addr().Port())
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	// Open a TCP connection so Close has one to cut.
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return s.tcpConns.Load() == 1 })
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("second Run: no error")
	}
	s.Close()
	s.Close() // idempotent
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after Close")
	}

	// Close before Run: Run reports it.
	s2, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := s2.Run(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("run after close: %v, want net.ErrClosed", err)
	}

	// Port in use: a clear error.
	s3, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if _, err := New(Config{Listen: s3.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("second bind: %v, want a listen error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string // substring; "" means valid
	}{
		{name: "zero value", cfg: Config{}},
		{name: "full", cfg: Config{Listen: "[::1]:5353", Zone: "ClusterSet.Local", TTL: 30 * time.Second, UDPSize: 4096, MaxTCPConns: 10, TCPIdleTimeout: time.Second}},
		{name: "listen without port", cfg: Config{Listen: "127.0.0.1"}, err: "listen"},
		{name: "listen bad host", cfg: Config{Listen: "nohost:53"}, err: "listen: host"},
		{name: "listen bad port", cfg: Config{Listen: "127.0.0.1:99999"}, err: "listen: port"},
		{name: "zone root", cfg: Config{Zone: "."}, err: "zone"},
		{name: "zone bad label", cfg: Config{Zone: "cluster_set.local."}, err: "zone"},
		{name: "zone empty label", cfg: Config{Zone: "a..local."}, err: "zone"},
		{name: "ttl fraction", cfg: Config{TTL: 1500 * time.Millisecond}, err: "ttl"},
		{name: "ttl negative", cfg: Config{TTL: -time.Second}, err: "ttl"},
		{name: "ttl huge", cfg: Config{TTL: 48 * time.Hour}, err: "ttl"},
		{name: "udp size small", cfg: Config{UDPSize: 100}, err: "udp size"},
		{name: "max tcp negative", cfg: Config{MaxTCPConns: -1}, err: "max tcp"},
		{name: "idle negative", cfg: Config{TCPIdleTimeout: -1}, err: "idle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
}

// TestUDPAnswerFromQueriedAddress: a server on a wildcard address answers
// from the address the query was sent to, not the one the kernel would pick
// for the route back. A query to 127.0.0.2 from 127.0.0.1 would otherwise be
// answered from 127.0.0.1, which a connected client (and conntrack, for a
// query that came through a Service's DNAT) does not take as the answer.
func TestUDPAnswerFromQueriedAddress(t *testing.T) {
	var st Static
	s := startServer(t, Config{Listen: "0.0.0.0:0", Imports: &st})
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), s.Addr().Port()).String()
	m := new(mdns.Msg)
	m.SetQuestion("x.y.svc.clusterset.local.", mdns.TypeA)
	udp := &mdns.Client{Net: "udp", Timeout: 2 * time.Second}
	var err error
	for range 5 { // a lost datagram on a loaded host is not the failure
		var resp *mdns.Msg
		if resp, _, err = udp.Exchange(m, addr); err == nil {
			if resp.Id != m.Id {
				t.Fatalf("answer id %d, want %d", resp.Id, m.Id)
			}
			return
		}
	}
	t.Fatalf("no answer from %s: %v", addr, err)
}
