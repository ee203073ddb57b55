package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/internal/testenv"
)

// TestBrokerIdentity: brokers and clusters have distinct identities and
// each side checks the other's, with real processes. A cluster's gateway
// (a clusterset member with a valid certificate) cannot serve as a broker:
// the client refuses it whatever TLS configuration it was given. A
// broker's certificate cannot connect to a broker as a cluster. A broker
// started with a cluster's certificate refuses to start.
func TestBrokerIdentity(t *testing.T) {
	dir := pki(t, "broker1", "broker2", "a", "b")
	bin := testenv.StraitBinary(t)

	t.Run("gateway posing as broker", func(t *testing.T) {
		wan := testenv.FreeAddr(t)
		conf := write(t, filepath.Join(t.TempDir(), "gw.yaml"), fmt.Sprintf("cluster: b\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\npreconnect: -1\n",
			dir, wan, filepath.Join(t.TempDir(), "b.sock"), filepath.Join(t.TempDir(), "state.json")))
		testenv.Start(t, bin, "gateway", "--config", conf)
		id := loadID(t, dir, "a")
		for name, conf := range map[string]*tls.Config{
			"broker TLS":  id.BrokerClientTLS(),
			"cluster TLS": id.ClientTLS(""), // a caller's mistake: the client checks anyway
		} {
			c, err := NewClient(ClientConfig{Brokers: []string{wan}, TLS: conf, Cluster: "a"})
			if err != nil {
				t.Fatal(err)
			}
			var derr error
			eventually(t, "gateway listening", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var s *session
				s, derr = c.dial(ctx, wan)
				if s != nil {
					s.conn.Close()
				}
				return derr == nil || !strings.Contains(derr.Error(), "connection refused")
			})
			if !errors.Is(derr, fabric.ErrWrongRole) {
				t.Fatalf("%s: dialing a gateway as a broker = %v, want %v", name, derr, fabric.ErrWrongRole)
			}
			c.Close()
		}
	})

	t.Run("broker posing as cluster", func(t *testing.T) {
		p := startBrokerProc(t, dir, "broker1", "", fmt.Sprintf("{path: %s}", filepath.Join(t.TempDir(), "b.db")))
		r, err := dialRaw(t, p.addr, loadID(t, dir, "broker2").BrokerClientTLS())
		if err == nil {
			// TLS 1.3: the server's verdict arrives after the handshake, so
			// either the hello's write (the server already closed) or the
			// first read fails.
			if err = writeFrame(r.c, &message{T: msgHello, V: ProtocolVersion, Cluster: "broker2"}); err == nil {
				_, err = readFrame(r.br)
			}
		}
		if err == nil {
			t.Fatal("a broker's certificate got a session as a cluster")
		}
		// A cluster still gets one.
		c, _ := startClient(t, dir, "a", p.addr)
		eventually(t, "a cluster connected", func() bool { return c.Stats().Connects == 1 })
	})

	t.Run("broker with a cluster certificate", func(t *testing.T) {
		conf := write(t, filepath.Join(t.TempDir(), "b.yaml"), fmt.Sprintf("id: a\nidentity: {dir: %s}\nlisten: %s\nstore: {path: %s}\n",
			dir, testenv.FreeAddr(t), filepath.Join(t.TempDir(), "b.db")))
		out, err := exec.Command(bin, "broker", "--config", conf).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "cluster identity, want a broker") {
			t.Fatalf("broker with a cluster certificate: %v\n%s", err, out)
		}
	})
}

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
