// Package tunneltest has what tests of tunnel transports share: a throwaway
// fabric PKI and a conformance suite that every Transport must pass, so the
// TLS multiplexer and QUIC are held to one written contract.
package tunneltest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/tunnel"
)

// PKI is a throwaway fabric CA (ECDSA P-256) issuing leaf certificates with
// URI SAN spiffe://test/cluster/<id>.
type PKI struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	Pool  *x509.CertPool
}

// NewPKI creates a CA.
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "strait test fabric CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &PKI{ca: ca, caKey: key, Pool: pool}
}

// Leaf issues a certificate for cluster id, valid for localhost and
// 127.0.0.1, usable by clients and servers.
func (p *PKI) Leaf(tb testing.TB, id string) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{{Scheme: "spiffe", Host: "test", Path: "/cluster/" + id}},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		tb.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ClientTLS is a client config for cluster id trusting the CA.
func (p *PKI) ClientTLS(tb testing.TB, id string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.Leaf(tb, id)},
		RootCAs:      p.Pool,
		ServerName:   "localhost",
		MinVersion:   tls.VersionTLS13,
	}
}

// ServerTLS is a server config for cluster id requiring a client
// certificate from the CA.
func (p *PKI) ServerTLS(tb testing.TB, id string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.Leaf(tb, id)},
		ClientCAs:    p.Pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// Pair returns a connected client and server session of tr over loopback;
// both are closed when tb ends.
func Pair(tb testing.TB, tr tunnel.Transport) (client, server tunnel.Session) {
	tb.Helper()
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		s   tunnel.Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := ln.Accept(ctx)
		ch <- res{s, err}
	}()
	client, err = tr.Dial(ctx, ln.Addr().String())
	if err != nil {
		ln.Close()
		tb.Fatal(err)
	}
	r := <-ch
	ln.Close()
	if r.err != nil {
		client.Close()
		tb.Fatal(r.err)
	}
	tb.Cleanup(func() {
		client.Close()
		r.s.Close()
	})
	return client, r.s
}

// Conformance runs the contract tests of Stream and Session on pairs made by
// newPair (client identity "spiffe://test/cluster/a", server ".../b").
func Conformance(t *testing.T, newPair func(t *testing.T) (client, server tunnel.Session)) {
	ctx := context.Background()
	t.Run("HeaderAndEcho", func(t *testing.T) {
		c, s := newPair(t)
		if c.Peer() != "spiffe://test/cluster/b" || s.Peer() != "spiffe://test/cluster/a" {
			t.Fatalf("peers: client sees %q, server sees %q", c.Peer(), s.Peer())
		}
		go func() {
			st, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			defer st.Close()
			st.Write(st.Header())
			io.Copy(st, st)
		}()
		hdr := []byte("export=web.prod;src=cluster-a")
		st, err := c.OpenStream(ctx, hdr)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		st.CloseWrite()
		got, err := io.ReadAll(st)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(hdr) + "ping"; string(got) != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})

	t.Run("HeaderTooLarge", func(t *testing.T) {
		c, _ := newPair(t)
		_, err := c.OpenStream(ctx, make([]byte, 1<<20))
		if !errors.Is(err, tunnel.ErrHeaderTooLarge) {
			t.Fatalf("err = %v, want ErrHeaderTooLarge", err)
		}
	})

	t.Run("HalfClose", func(t *testing.T) {
		c, s := newPair(t)
		st, err := c.OpenStream(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("request"))
		st.CloseWrite()
		peer, err := s.AcceptStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req, err := io.ReadAll(peer)
		if err != nil || string(req) != "request" {
			t.Fatalf("server read %q, %v", req, err)
		}
		// The server's direction still works after the client's EOF.
		peer.Write([]byte("response"))
		peer.Close()
		resp, err := io.ReadAll(st)
		if err != nil || string(resp) != "response" {
			t.Fatalf("client read %q, %v", resp, err)
		}
		if _, err := st.Write([]byte("x")); err == nil {
			t.Fatal("write after CloseWrite succeeded")
		}
		st.Close()
	})

	t.Run("Refuse", func(t *testing.T) {
		c, s := newPair(t)
		go func() {
			st, err := s.AcceptStream(ctx)
			if err == nil {
				st.Reset("unknown export web.prod")
			}
		}()
		st, err := c.OpenStream(ctx, []byte("web.prod"))
		if err != nil {
			t.Fatal(err)
		}
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = st.Read(make([]byte, 1))
		var re *tunnel.ResetError
		if !errors.As(err, &re) || !re.Remote || re.Reason != "unknown export web.prod" {
			t.Fatalf("read err = %v, want remote ResetError with the reason", err)
		}
		// Writes fail too once the refusal arrived (QUIC may need a moment;
		// a busy host many).
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err = st.Write([]byte("x"))
			if err != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !errors.As(err, &re) {
			t.Fatalf("write err = %v, want ResetError", err)
		}
	})

	t.Run("ReadDeadline", func(t *testing.T) {
		c, _ := newPair(t)
		st, err := c.OpenStream(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		st.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err = st.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err = %v, want os.ErrDeadlineExceeded", err)
		}
		st.Close()
	})

	t.Run("ConcurrentIntegrity", func(t *testing.T) {
		c, s := newPair(t)
		const streams, size = 32, 256 << 10
		go func() {
			for {
				st, err := s.AcceptStream(ctx)
				if err != nil {
					return
				}
				go func() {
					// Echo the sha256 of everything received.
					h := sha256.New()
					io.Copy(h, st)
					st.Write(h.Sum(nil))
					st.Close()
				}()
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				data := make([]byte, size+i*1000)
				rand.Read(data)
				want := sha256.Sum256(data)
				st, err := c.OpenStream(ctx, fmt.Appendf(nil, "stream-%d", i))
				if err != nil {
					errs <- err
					return
				}
				defer st.Close()
				// Odd-sized writes cross frame boundaries.
				for p := data; len(p) > 0; {
					n := min(len(p), 7777+i)
					if _, err := st.Write(p[:n]); err != nil {
						errs <- err
						return
					}
					p = p[n:]
				}
				st.CloseWrite()
				got, err := io.ReadAll(st)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want[:]) {
					errs <- fmt.Errorf("stream %d: digest mismatch", i)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("SlowReadersDoNotBlockOthers", func(t *testing.T) {
		c, s := newPair(t)
		// A bulk transfer first, so windows have grown as on a warm session.
		warm, err := c.OpenStream(ctx, []byte("warm"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			warm.Write(make([]byte, 32<<20))
			warm.CloseWrite()
		}()
		warmPeer, err := s.AcceptStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, warmPeer); err != nil || n != 32<<20 {
			t.Fatalf("warm-up transfer: %d bytes, %v", n, err)
		}
		// Two streams whose readers never read fill their windows.
		stuck := make(chan struct{}, 2)
		var slows, slowPeers []tunnel.Stream
		for i := range 2 {
			slow, err := c.OpenStream(ctx, fmt.Appendf(nil, "slow-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				slow.Write(make([]byte, 64<<20))
				stuck <- struct{}{}
			}()
			slowPeer, err := s.AcceptStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slows, slowPeers = append(slows, slow), append(slowPeers, slowPeer)
		}
		time.Sleep(100 * time.Millisecond) // let them fill their windows
		fast, err := c.OpenStream(ctx, []byte("fast"))
		if err != nil {
			t.Fatal(err)
		}
		fastPeer, err := s.AcceptStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			fast.Write(make([]byte, 8<<20))
			fast.CloseWrite()
		}()
		fastPeer.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, fastPeer)
		if err != nil || n != 8<<20 {
			t.Fatalf("fast stream read %d bytes, %v while the slow ones are stuck", n, err)
		}
		select {
		case <-stuck:
			t.Fatal("a slow stream's 64 MiB write finished although nobody read it")
		default:
		}
		for i := range slows {
			slowPeers[i].Reset("done")
			slows[i].Reset("done")
		}
		<-stuck
		<-stuck
	})

	t.Run("SessionCloseEndsStreams", func(t *testing.T) {
		c, s := newPair(t)
		st, err := c.OpenStream(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("x"))
		if _, err := s.AcceptStream(ctx); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := st.Read(make([]byte, 1))
			errc <- err
		}()
		s.Close()
		select {
		case err := <-errc:
			if err == nil || err == io.EOF {
				t.Fatalf("read on a stream of a closed session: %v, want an error", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("read did not end after the peer closed the session")
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("client session not done after the server closed")
		}
		if c.Err() == nil {
			t.Fatal("Err is nil after Done")
		}
		if _, err := c.OpenStream(ctx, nil); err == nil {
			t.Fatal("OpenStream on a dead session succeeded")
		}
	})
}
