package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// brokerProc is a real `strait broker` process.
type brokerProc struct {
	id, addr, conf string
	cmd            *exec.Cmd
}

// startBrokerProc writes a config and starts the broker; store is the
// YAML of the store field. addr "" picks a free port.
func startBrokerProc(t *testing.T, dir, id, addr, store string) *brokerProc {
	t.Helper()
	if addr == "" {
		addr = testenv.FreeAddr(t)
	}
	conf := filepath.Join(t.TempDir(), id+".yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "id: %s\nidentity: {dir: %s}\nlisten: %s\nstore: %s\n", id, dir, addr, store), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &brokerProc{id: id, addr: addr, conf: conf}
	p.start(t)
	return p
}

func (p *brokerProc) start(t *testing.T) {
	t.Helper()
	p.cmd = testenv.Start(t, testenv.StraitBinary(t), "broker", "--config", p.conf)
	eventually(t, "broker "+p.id+" listening", func() bool {
		c, err := tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
		}
		return err == nil || !strings.Contains(err.Error(), "connection refused")
	})
}

func (p *brokerProc) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	_, _ = p.cmd.Process.Wait()
}

// rawConn is a hand-driven protocol connection, for sending what a
// well-behaved client never would.
type rawConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string, conf *tls.Config) (*rawConn, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{c: c, br: bufio.NewReader(c)}, nil
}

func (r *rawConn) send(t *testing.T, m *message) {
	t.Helper()
	if err := writeFrame(r.c, m); err != nil {
		t.Fatal(err)
	}
}

func (r *rawConn) read(t *testing.T) *message {
	t.Helper()
	m, err := readFrame(r.br)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return m
}

// expectClosedWith reads until an error frame with code, then expects
// the broker to close the connection.
func (r *rawConn) expectClosedWith(t *testing.T, code string) *message {
	t.Helper()
	for {
		m := r.read(t)
		if m.T != msgError {
			continue // snapshot or deltas before the verdict
		}
		if m.Code != code {
			t.Fatalf("error %s: %s, want code %s", m.Code, m.Msg, code)
		}
		if _, err := readFrame(r.br); !errors.Is(err, io.EOF) && !isEOF(err) {
			t.Fatalf("after the error frame: %v, want the connection closed", err)
		}
		return m
	}
}

func hello(t *testing.T, addr string, conf *tls.Config, cluster string, since uint64) *rawConn {
	t.Helper()
	r, err := dialRaw(t, addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, &message{T: msgHello, V: ProtocolVersion, Cluster: cluster, Since: since})
	return r
}

// TestBrokerRejectsBadInput runs a real broker process and checks that
// every kind of bad input is refused with its reason, closes only that
// connection, and leaves a well-behaved client untouched.
func TestBrokerRejectsBadInput(t *testing.T) {
	dir := pki(t, "broker1", "a", "b")
	p := startBrokerProc(t, dir, "broker1", "", fmt.Sprintf("{path: %s}", filepath.Join(t.TempDir(), "b.db")))
	watcher, _ := startClient(t, dir, "b", p.addr)
	aTLS := loadID(t, dir, "a").BrokerClientTLS()

	t.Run("unknown CA", func(t *testing.T) {
		other := pki(t, "a") // same cluster name, another clusterset CA
		r, err := dialRaw(t, p.addr, loadID(t, other, "a").BrokerClientTLS())
		if err == nil {
			// TLS 1.3: the server's verdict arrives after the handshake, so
			// either the hello's write (the server already closed) or the
			// first read fails.
			if err = writeFrame(r.c, &message{T: msgHello, V: ProtocolVersion, Cluster: "a"}); err == nil {
				_, err = readFrame(r.br)
			}
		}
		if err == nil {
			t.Fatal("a certificate of another CA got a session")
		}
	})
	t.Run("hello for another cluster", func(t *testing.T) {
		m := hello(t, p.addr, aTLS, "b", 0).expectClosedWith(t, CodeForbidden)
		if !strings.Contains(m.Msg, `"a"`) {
			t.Fatalf("reason %q does not name the certificate's cluster", m.Msg)
		}
	})
	t.Run("publish for another cluster", func(t *testing.T) {
		r := hello(t, p.addr, aTLS, "a", 0)
		r.send(t, &message{T: msgPublish, Seq: 1, Cluster: "b", Put: exportsN("stolen", 1)})
		r.expectClosedWith(t, CodeForbidden)
	})
	t.Run("oversized", func(t *testing.T) {
		r := hello(t, p.addr, aTLS, "a", 0)
		r.c.Write([]byte{0x7f, 0xff, 0xff, 0xff})
		r.expectClosedWith(t, CodeTooLarge)
	})
	t.Run("malformed", func(t *testing.T) {
		r := hello(t, p.addr, aTLS, "a", 0)
		r.c.Write(frameBytes(`{"t":"publish","seq":1,"cluster":"a","put":[{"name":"UPPER","namespace":"x"}]}`))
		r.expectClosedWith(t, CodeMalformed)
	})
	t.Run("future revision", func(t *testing.T) {
		hello(t, p.addr, aTLS, "a", 1<<40).expectClosedWith(t, CodeFuture)
	})
	t.Run("replayed revision", func(t *testing.T) {
		r := hello(t, p.addr, aTLS, "a", 0)
		pub := &message{T: msgPublish, Seq: 1, Cluster: "a", Put: exportsN("first", 1)}
		r.send(t, pub)
		var ack *message
		for ack == nil {
			if m := r.read(t); m.T == msgAck {
				ack = m
			}
		}
		// The same publish again, base 0: the cluster's entries moved on.
		r2 := hello(t, p.addr, aTLS, "a", 0)
		r2.send(t, pub)
		m := r2.expectClosedWith(t, CodeStale)
		if !strings.Contains(m.Msg, "base revision 0") {
			t.Fatalf("reason %q does not name the stale base", m.Msg)
		}
	})

	// The well-behaved client never lost its session and sees a's one
	// accepted export (and nothing stolen).
	eventually(t, "b sees a's export", func() bool { return hasExport(watcher, "a", "default/first0") })
	if n := watcher.Stats().Connects; n != 1 {
		t.Fatalf("the watching client connected %d times, want 1", n)
	}
	if hasExport(watcher, "b", "default/stolen0") {
		t.Fatal("a published into b's entries")
	}
}

// TestResumeAfterRestart: a broker restarted over the same store file
// serves a reconnecting client deltas from its last revision, no
// snapshot, and what was published meanwhile arrives.
func TestResumeAfterRestart(t *testing.T) {
	dir := pki(t, "broker1", "a", "b")
	db := filepath.Join(t.TempDir(), "b.db")
	p := startBrokerProc(t, dir, "broker1", "", fmt.Sprintf("{path: %s}", db))
	a, rec := startClient(t, dir, "a", p.addr)
	b, _ := startClient(t, dir, "b", p.addr)
	ctx := ctxT(t)
	if _, err := b.Publish(ctx, ClusterState{Exports: exportsN("one", 10)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b's first exports", func() bool { return hasExport(a, "b", "default/one9") })

	p.kill(t, syscall.SIGTERM)
	eventually(t, "a notices", func() bool { return a.Broker() == "" })
	p.start(t)
	if _, err := b.Publish(ctx, ClusterState{Exports: append(exportsN("one", 10), exportsN("two", 5)...)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b's later exports", func() bool { return hasExport(a, "b", "default/two4") })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	snaps := 0
	for _, u := range rec.updates {
		if u.Snapshot {
			snaps++
		}
	}
	if snaps != 1 {
		t.Fatalf("%d snapshots, want 1 (the reconnect should resume with deltas)", snaps)
	}
	if n := a.Stats().Connects; n != 2 {
		t.Fatalf("a connected %d times, want 2", n)
	}
}

// TestFailover runs two stateless brokers over a real etcd, kills the one
// a client is on, and checks the client moves to the other at once: its
// new session starts while the dead broker is still a member (so it did
// not wait for the membership lease to expire and the assignment to
// follow), and publishing continues.
func TestFailover(t *testing.T) {
	dir := pki(t, "broker1", "broker2", "a", "b")
	url := startEtcd(t)
	// The dead broker's membership outlives it by more than the test
	// waits for anything (eventually: 30s), so "moved before the lease
	// expired" is a fact to check, not a race against a 2s lease on a busy
	// host.
	store := fmt.Sprintf("{etcd: [%s], lease-ttl: 90s}", url)
	p1 := startBrokerProc(t, dir, "broker1", "", store)
	p2 := startBrokerProc(t, dir, "broker2", "", store)
	procs := map[string]*brokerProc{"broker1": p1, "broker2": p2}

	var mu sync.Mutex
	var connects []string
	var connectTimes []time.Time
	rec := &recorder{changed: make(chan struct{}, 1)}
	a, err := NewClient(ClientConfig{Brokers: []string{p1.addr, p2.addr}, TLS: loadID(t, dir, "a").BrokerClientTLS(), Cluster: "a",
		OnUpdate: rec.add, OnConnect: func(b string) {
			mu.Lock()
			connects, connectTimes = append(connects, b), append(connectTimes, time.Now())
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	b, _ := startClient(t, dir, "b", p1.addr, p2.addr)
	// One bound for the whole test's requests, which span several waits.
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pcancel()
	if _, err := a.Publish(pctx, ClusterState{Exports: exportsN("x", 3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(pctx, ClusterState{Exports: exportsN("y", 3)}); err != nil {
		t.Fatal(err)
	}
	// Both brokers live and an assignment covering both clusters.
	eventually(t, "assignment", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.m.brokers) == 2 && len(a.m.assign.Clusters) == 2 && a.sess != nil && a.sess.broker == a.m.assign.Clusters["a"]
	})
	victim := a.Broker()

	st, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	member := func() bool {
		_, ok, err := st.Get(pctx, prefixBroker+victim)
		if err != nil {
			t.Fatalf("etcd get %s: %v", prefixBroker+victim, err)
		}
		return ok
	}
	if !member() {
		t.Fatalf("broker %s is not a member before the kill", victim)
	}
	mu.Lock()
	before := len(connects)
	mu.Unlock()
	killed := time.Now()
	procs[victim].kill(t, syscall.SIGKILL)

	var movedAt time.Time
	eventually(t, "a on the other broker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := before; i < len(connects); i++ {
			if connects[i] != victim {
				movedAt = connectTimes[i]
				return true
			}
		}
		return false
	})
	// Membership only ever goes: still there now means still there when
	// a's new session started.
	if !member() {
		t.Fatalf("a moved only after the dead broker %s left the membership (%v after the kill, lease 90s)", victim, movedAt.Sub(killed))
	}
	t.Logf("failover: new session %v after the kill (the lease would expire after 90s)", movedAt.Sub(killed).Round(time.Millisecond))
	if _, err := a.Publish(pctx, ClusterState{Exports: exportsN("x", 5)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b sees a's publish after the failover", func() bool { return hasExport(b, "a", "default/x4") })
}
