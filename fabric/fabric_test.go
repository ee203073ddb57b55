package fabric

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/atomicfile"
)

func newTestCA(t *testing.T, clusterset string) *CA {
	t.Helper()
	now := time.Now()
	ca, err := NewCA(clusterset, now.Add(-time.Hour), now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writeIdentity issues a certificate for cluster and writes the files
// Load reads to dir.
func writeIdentity(t *testing.T, dir string, ca *CA, cluster string, notBefore, notAfter time.Time) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(cluster, notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, ca, cluster, certPEM, keyPEM)
}

func writeFiles(t *testing.T, dir string, ca *CA, cluster string, certPEM, keyPEM []byte) {
	t.Helper()
	for name, data := range map[string][]byte{KeyFile(cluster): keyPEM, CertFile(cluster): certPEM, CACertFile: ca.CertPEM()} {
		if err := atomicfile.Write(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func newIdentity(t *testing.T, ca *CA, cluster string) *Identity {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	writeIdentity(t, dir, ca, cluster, now.Add(-time.Minute), now.Add(time.Hour))
	id, err := Load(Config{Dir: dir, Cluster: cluster, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// rawCert is a certificate Load would refuse, for playing a bad peer.
func rawCert(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type result struct {
	serverErr, clientErr error
	serverState          tls.ConnectionState
	clientState          tls.ConnectionState
}

// handshake connects a client to a server over 127.0.0.1 and exchanges one
// message, so a rejection by either side surfaces (in TLS 1.3 the client
// finishes its handshake before the server has checked its certificate).
func handshake(t *testing.T, client, server *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type srv struct {
		err error
		cs  tls.ConnectionState
	}
	done := make(chan srv, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- srv{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- srv{err: err}
			return
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(tc, buf); err == nil {
			_, _ = tc.Write(buf)
		}
		done <- srv{cs: tc.ConnectionState()}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, client)
	var r result
	r.clientErr = tc.Handshake()
	if r.clientErr == nil {
		buf := []byte("ping")
		if _, err := tc.Write(buf); err != nil {
			r.clientErr = err
		} else if _, err := io.ReadFull(tc, buf); err != nil {
			r.clientErr = err
		}
		r.clientState = tc.ConnectionState()
	}
	s := <-done
	r.serverErr, r.serverState = s.err, s.cs
	return r
}

func TestHandshake(t *testing.T) {
	ca := newTestCA(t, "demo")
	stranger := newTestCA(t, "demo") // same clusterset name, other key
	west := newIdentity(t, ca, "west")
	east := newIdentity(t, ca, "east")
	now := time.Now()

	issue := func(ca *CA, cluster string, nb, na time.Time) tls.Certificate {
		c, k, err := ca.Issue(cluster, nb, na)
		if err != nil {
			t.Fatal(err)
		}
		return rawCert(t, c, k)
	}
	issueURI := func(uri string) tls.Certificate {
		var uris []*url.URL
		if uri != "" {
			u, _ := url.Parse(uri)
			uris = append(uris, u)
		}
		c, k, err := ca.issue("odd", uris, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return rawCert(t, c, k)
	}
	badClient := func(cert *tls.Certificate) *tls.Config {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return cfg
	}
	badServer := func(cert tls.Certificate) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	}
	ptr := func(c tls.Certificate) *tls.Certificate { return &c }

	tests := []struct {
		name             string
		client, server   *tls.Config
		clientErr        error // want errors.Is on the client's side, nil for success
		serverErr        error
		verifier         *Identity // the side that rejects, for counting
		wantClientSeesID string    // on success
		wantServerSeesID string
	}{
		{name: "ok", client: east.ClientTLS("west"), server: west.ServerTLS(), wantClientSeesID: "west", wantServerSeesID: "east"},
		{name: "ok any peer", client: east.ClientTLS(""), server: west.ServerTLS(), wantClientSeesID: "west", wantServerSeesID: "east"},
		{name: "client unknown CA", client: badClient(ptr(issue(stranger, "east", now.Add(-time.Hour), now.Add(time.Hour)))),
			server: west.ServerTLS(), serverErr: ErrUnknownCA, verifier: west},
		{name: "server unknown CA", client: east.ClientTLS("west"),
			server: badServer(issue(stranger, "west", now.Add(-time.Hour), now.Add(time.Hour))), clientErr: ErrUnknownCA, verifier: east},
		{name: "client expired", client: badClient(ptr(issue(ca, "east", now.Add(-3*time.Hour), now.Add(-time.Hour)))),
			server: west.ServerTLS(), serverErr: ErrExpired, verifier: west},
		{name: "server expired", client: east.ClientTLS("west"),
			server: badServer(issue(ca, "west", now.Add(-3*time.Hour), now.Add(-time.Hour))), clientErr: ErrExpired, verifier: east},
		{name: "client not yet valid", client: badClient(ptr(issue(ca, "east", now.Add(time.Hour), now.Add(3*time.Hour)))),
			server: west.ServerTLS(), serverErr: ErrNotYetValid, verifier: west},
		{name: "server not yet valid", client: east.ClientTLS("west"),
			server: badServer(issue(ca, "west", now.Add(time.Hour), now.Add(3*time.Hour))), clientErr: ErrNotYetValid, verifier: east},
		{name: "wrong cluster", client: east.ClientTLS("north"), server: west.ServerTLS(), clientErr: ErrWrongCluster, verifier: east},
		{name: "client wrong clusterset", client: badClient(ptr(issueURI("spiffe://other/cluster/east"))),
			server: west.ServerTLS(), serverErr: ErrWrongClusterset, verifier: west},
		{name: "server wrong clusterset", client: east.ClientTLS("west"),
			server: badServer(issueURI("spiffe://other/cluster/west")), clientErr: ErrWrongClusterset, verifier: east},
		{name: "client without certificate", client: badClient(nil), server: west.ServerTLS(), serverErr: ErrNoIdentity, verifier: west},
		{name: "client without URI SAN", client: badClient(ptr(issueURI(""))), server: west.ServerTLS(), serverErr: ErrNoIdentity, verifier: west},
		{name: "client with foreign URI SAN", client: badClient(ptr(issueURI("https://demo/cluster/east"))),
			server: west.ServerTLS(), serverErr: ErrNoIdentity, verifier: west},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before uint64
			if tt.verifier != nil {
				before = tt.verifier.Rejections()[Classify(errors.Join(tt.clientErr, tt.serverErr))]
			}
			r := handshake(t, tt.client, tt.server)
			if tt.serverErr == nil && tt.clientErr == nil {
				if r.clientErr != nil || r.serverErr != nil {
					t.Fatalf("client error %v, server error %v; want success", r.clientErr, r.serverErr)
				}
				if got, err := east.PeerCluster(r.clientState); err != nil || got != tt.wantClientSeesID {
					t.Errorf("client: PeerCluster = %q, %v; want %q", got, err, tt.wantClientSeesID)
				}
				if got, err := west.PeerCluster(r.serverState); err != nil || got != tt.wantServerSeesID {
					t.Errorf("server: PeerCluster = %q, %v; want %q", got, err, tt.wantServerSeesID)
				}
				if v := r.clientState.Version; v != tls.VersionTLS13 {
					t.Errorf("version %x, want TLS 1.3", v)
				}
				return
			}
			if tt.serverErr != nil && !errors.Is(r.serverErr, tt.serverErr) {
				t.Errorf("server error = %v; want %v", r.serverErr, tt.serverErr)
			}
			if tt.clientErr != nil && !errors.Is(r.clientErr, tt.clientErr) {
				t.Errorf("client error = %v; want %v", r.clientErr, tt.clientErr)
			}
			if r.clientErr == nil || r.serverErr == nil {
				t.Errorf("both sides must fail: client %v, server %v", r.clientErr, r.serverErr)
			}
			reason := Classify(errors.Join(tt.clientErr, tt.serverErr))
			if got := tt.verifier.Rejections()[reason]; got != before+1 {
				t.Errorf("rejections[%s] = %d, want %d", reason, got, before+1)
			}
		})
	}
}

func TestServerRefusesOlderTLS(t *testing.T) {
	ca := newTestCA(t, "demo")
	west := newIdentity(t, ca, "west")
	east := newIdentity(t, ca, "east")
	srv := west.ServerTLS()
	cli := east.ClientTLS("west")
	// A TLS 1.2 client: the server must refuse it.
	cli.MinVersion, cli.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if r := handshake(t, cli, srv); r.clientErr == nil || r.serverErr == nil {
		t.Fatalf("TLS 1.2 handshake succeeded: %+v", r)
	}
}

func TestLoadRejects(t *testing.T) {
	ca := newTestCA(t, "demo")
	other := newTestCA(t, "demo")
	now := time.Now()
	tests := []struct {
		name  string
		setup func(dir string)
		cfg   func(dir string) Config
		want  error // errors.Is, or nil to only require an error
	}{
		{"expired own certificate", func(dir string) {
			writeIdentity(t, dir, ca, "west", now.Add(-3*time.Hour), now.Add(-time.Hour))
		}, nil, ErrExpired},
		{"certificate of another CA", func(dir string) {
			c, k, _ := other.Issue("west", now.Add(-time.Hour), now.Add(time.Hour))
			writeFiles(t, dir, ca, "west", c, k)
		}, nil, ErrUnknownCA},
		{"key of another certificate", func(dir string) {
			c, _, _ := ca.Issue("west", now.Add(-time.Hour), now.Add(time.Hour))
			_, k, _ := ca.Issue("west", now.Add(-time.Hour), now.Add(time.Hour))
			writeFiles(t, dir, ca, "west", c, k)
		}, nil, nil},
		{"configured cluster differs", func(dir string) {
			writeIdentity(t, dir, ca, "west", now.Add(-time.Hour), now.Add(time.Hour))
			_ = os.Rename(filepath.Join(dir, "west.crt"), filepath.Join(dir, "east.crt"))
			_ = os.Rename(filepath.Join(dir, "west.key"), filepath.Join(dir, "east.key"))
		}, func(dir string) Config { return Config{Dir: dir, Cluster: "east"} }, nil},
		{"missing files", func(string) {}, nil, os.ErrNotExist},
		{"no files named", func(string) {}, func(string) Config { return Config{} }, nil},
		{"bad cluster name", func(string) {}, func(dir string) Config { return Config{Dir: dir, Cluster: "West"} }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(dir)
			cfg := Config{Dir: dir, Cluster: "west"}
			if tt.cfg != nil {
				cfg = tt.cfg(dir)
			}
			_, err := Load(cfg)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Load = %v; want error %v", err, tt.want)
			}
		})
	}
}

// TestRotation replaces a server's files: new handshakes get the new
// certificate, a connection opened before keeps working, and a
// half-written rotation (new key, old certificate) is not picked up.
func TestRotation(t *testing.T) {
	ca := newTestCA(t, "demo")
	east := newIdentity(t, ca, "east")
	dir := t.TempDir()
	now := time.Now()
	writeIdentity(t, dir, ca, "west", now.Add(-time.Minute), now.Add(time.Hour))
	west, err := Load(Config{Dir: dir, Cluster: "west", PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- west.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	oldSerial := west.Certificate().SerialNumber

	ln, err := tls.Listen("tcp", "127.0.0.1:0", west.ServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), east.ClientTLS("west"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	echo := func(c *tls.Conn, msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("write: %v", err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo = %q, %v; want %q", buf, err, msg)
		}
	}
	open := dial()
	defer open.Close()
	echo(open, "before")

	// Half a rotation: a new key next to the old certificate.
	_, newKey, err := ca.Issue("west", now.Add(-time.Minute), now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "west.key"), newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := west.Reload(); err == nil || changed {
		t.Fatalf("Reload of mismatched pair = %v, %v; want an error", changed, err)
	}
	if c := dial(); c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(oldSerial) != 0 {
		t.Fatal("a mismatched pair replaced the certificate")
	} else {
		c.Close()
	}

	// The whole rotation, picked up by Run's poller.
	writeIdentity(t, dir, ca, "west", now.Add(-time.Minute), now.Add(2*time.Hour))
	// Polled every 20 ms; the deadline only bounds a hung test.
	deadline := time.Now().Add(30 * time.Second)
	for west.Reloads() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("rotation not picked up within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	newSerial := west.Certificate().SerialNumber
	if newSerial.Cmp(oldSerial) == 0 {
		t.Fatal("serial unchanged after reload")
	}
	c := dial()
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(newSerial) != 0 {
		t.Errorf("new handshake got serial %x, want the new %x", got, newSerial)
	}
	echo(c, "new")
	echo(open, "still open")

	if changed, err := west.Reload(); err != nil || changed {
		t.Errorf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}
}

func TestCARollover(t *testing.T) {
	oldCA := newTestCA(t, "demo")
	newCA := newTestCA(t, "demo")
	bundle := append(newCA.CertPEM(), oldCA.CertPEM()...)
	now := time.Now()
	dirs := map[string]*CA{"west": newCA, "east": oldCA}
	ids := map[string]*Identity{}
	for cluster, ca := range dirs {
		dir := t.TempDir()
		writeIdentity(t, dir, ca, cluster, now.Add(-time.Minute), now.Add(time.Hour))
		if err := os.WriteFile(filepath.Join(dir, CACertFile), bundle, 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := Load(Config{Dir: dir, Cluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		ids[cluster] = id
	}
	if r := handshake(t, ids["east"].ClientTLS("west"), ids["west"].ServerTLS()); r.clientErr != nil || r.serverErr != nil {
		t.Fatalf("handshake across a CA rollover: client %v, server %v", r.clientErr, r.serverErr)
	}
	mixed := append(newCA.CertPEM(), newTestCA(t, "other").CertPEM()...)
	if _, _, err := parseCACerts(mixed); err == nil {
		t.Error("a bundle of two clustersets was accepted")
	}
	if _, err := ParseCA(bundle, mustKey(t, newCA)); err != nil {
		t.Errorf("ParseCA of a rollover bundle: %v", err)
	}
}

func mustKey(t *testing.T, ca *CA) []byte {
	k, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestIssueChecks(t *testing.T) {
	ca := newTestCA(t, "demo")
	now := time.Now()
	for _, tt := range []struct {
		name    string
		cluster string
		nb, na  time.Time
	}{
		{"upper case", "West", now, now.Add(time.Hour)},
		{"empty", "", now, now.Add(time.Hour)},
		{"dot", "a.b", now, now.Add(time.Hour)},
		{"negative lifetime", "west", now, now.Add(-time.Hour)},
		{"outlives the CA", "west", now, now.Add(1000 * time.Hour)},
	} {
		if _, _, err := ca.Issue(tt.cluster, tt.nb, tt.na); err == nil {
			t.Errorf("%s: Issue succeeded", tt.name)
		}
	}
	if _, err := NewCA("Demo", now, now.Add(time.Hour)); err == nil {
		t.Error("NewCA accepted an upper-case clusterset")
	}
}

func TestClassify(t *testing.T) {
	for i, e := range reasonErrs {
		if got := Classify(errors.Join(errors.New("x"), e)); got != Reasons[i] {
			t.Errorf("Classify(%v) = %s, want %s", e, got, Reasons[i])
		}
	}
	if got := Classify(io.EOF); got != ReasonOther {
		t.Errorf("Classify(EOF) = %s", got)
	}
	if !bytes.HasPrefix([]byte(SPIFFEID("a", "b")), []byte("spiffe://a/cluster/b")) {
		t.Error("SPIFFEID")
	}
}
