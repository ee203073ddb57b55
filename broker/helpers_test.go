package broker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// pki issues a clusterset CA and certificates for the given IDs in a temp
// directory and returns it.
func pki(t testing.TB, ids ...string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := fabric.InitDir(dir, "test", 24*time.Hour, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		issue := fabric.IssueFiles
		if isBroker(id) {
			issue = fabric.IssueBrokerFiles
		}
		if _, err := issue(dir, dir, id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// isBroker tells the tests' broker IDs (b1, broker2) from cluster IDs.
func isBroker(id string) bool {
	return strings.HasPrefix(id, "broker") || len(id) > 1 && id[0] == 'b' && id[1] >= '0' && id[1] <= '9'
}

func loadID(t testing.TB, dir, cluster string) *fabric.Identity {
	t.Helper()
	id, err := fabric.Load(fabric.Config{Dir: dir, Cluster: cluster, Broker: isBroker(cluster), PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// startServer runs an in-process broker over st on a loopback port.
func startServer(t testing.TB, dir, id string, st Store) *Server {
	t.Helper()
	s, err := NewWithStore(Config{ID: id, Listen: "127.0.0.1:0", Identity: IdentityFiles{Dir: dir}, Store: StoreConfig{Path: "unused"}}, loadID(t, dir, id), st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker %s: %v", id, err)
		}
	})
	return s
}

// startClient runs a client for cluster; updates are recorded.
type recorder struct {
	mu      sync.Mutex
	updates []Update
	changed chan struct{}
}

func (r *recorder) add(u Update) {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func startClient(t testing.TB, dir, cluster string, brokers ...string) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{changed: make(chan struct{}, 1)}
	c, err := NewClient(ClientConfig{Brokers: brokers, TLS: loadID(t, dir, cluster).BrokerClientTLS(), Cluster: cluster, OnUpdate: rec.add})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		c.Close()
		<-done
	})
	return c, rec
}

// eventually polls cond until it holds or a generous deadline passes
// (the deadline only bounds a hung test; no assertion depends on speed).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func exportsN(prefix string, n int) []Export {
	out := make([]Export, n)
	for i := range out {
		out[i] = Export{Namespace: "default", Name: fmt.Sprintf("%s%d", prefix, i), Ports: nil}
	}
	return out
}

// hasExport reports whether cluster's view holds export key of owner.
func hasExport(c *Client, owner, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.m.clusters[owner]
	if !c.synced || x == nil {
		return false
	}
	_, ok := x.exports[key]
	return ok
}

// etcdBinary returns the etcd built by scripts/k8s-tools.sh (building it
// on a fresh machine).
func etcdBinary(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(moduleRoot(), "scripts", "k8s-tools.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/k8s-tools.sh: %v", err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "etcd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("etcd from scripts/k8s-tools.sh: %v", err)
	}
	return bin
}

func moduleRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}

// startEtcd runs a real single-member etcd on loopback ports with a temp
// data directory and returns its client URL.
func startEtcd(t testing.TB) string {
	t.Helper()
	bin := etcdBinary(t)
	client, peer := "http://"+testenv.FreeAddr(t), "http://"+testenv.FreeAddr(t)
	testenv.Start(t, bin, "--name", "t", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t="+peer, "--log-level", "error", "--unsafe-no-fsync")
	// etcd is up in a second or two on a quiet host; the deadline only
	// bounds a hung start.
	st, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{client}})
	for deadline := time.Now().Add(60 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st, err = OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{client}})
	}
	if err != nil {
		t.Fatalf("etcd did not come up: %v", err)
	}
	st.Close()
	return client
}
