package tunnel_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"

	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// BenchmarkOpenStream opens a stream, sends a byte and closes it, without
// waiting for the peer (the pipelined cost a gateway pays per connection).
func BenchmarkOpenStream(b *testing.B) {
	client, server := tunneltest.Pair(b, newTLS(b, nil, func(c *tunnel.Config) { c.AcceptBacklog = 4096 }))
	go acceptDiscard(server)
	ctx := context.Background()
	one := []byte{1}
	for b.Loop() {
		st, err := client.OpenStream(ctx, []byte("export=web.prod"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Write(one); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}

// BenchmarkStreamRoundTrip opens a stream and waits for a 1-byte echo: the
// latency of a new connection through the tunnel on loopback.
func BenchmarkStreamRoundTrip(b *testing.B) {
	client, server := tunneltest.Pair(b, newTLS(b, nil, nil))
	go acceptEcho(server)
	ctx := context.Background()
	buf := []byte{1}
	for b.Loop() {
		st, err := client.OpenStream(ctx, []byte("export=web.prod"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(st, buf); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}

func acceptDiscard(s tunnel.Session) {
	for {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			io.Copy(io.Discard, st)
			st.Close()
		}()
	}
}

func acceptEcho(s tunnel.Session) {
	for {
		st, err := s.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			io.Copy(st, st)
			st.Close()
		}()
	}
}

// BenchmarkThroughput moves bulk data one way over a single stream on
// loopback, next to raw TLS 1.3 on one TCP connection, so the cost of the
// multiplexer shows as a ratio measured in one run.
func BenchmarkThroughput(b *testing.B) {
	pki := tunneltest.NewPKI(b)
	b.Run("mux", func(b *testing.B) {
		client, server := tunneltest.Pair(b, newTLS(b, pki, nil))
		done := make(chan int64)
		go func() {
			st, err := server.AcceptStream(context.Background())
			if err != nil {
				close(done)
				return
			}
			n, _ := io.Copy(io.Discard, st)
			done <- n
		}()
		st, err := client.OpenStream(context.Background(), nil)
		if err != nil {
			b.Fatal(err)
		}
		benchWrite(b, st, func() { st.CloseWrite(); <-done })
		b.ReportMetric(float64(server.Stats().StreamWindow>>10), "window-KiB")
	})
	b.Run("tls", func(b *testing.B) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", pki.ServerTLS(b, "b"))
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		done := make(chan int64)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				close(done)
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			done <- n
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), pki.ClientTLS(b, "a"))
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("raw TLS cipher suite: %s", tls.CipherSuiteName(c.ConnectionState().CipherSuite))
		benchWrite(b, c, func() { c.CloseWrite(); <-done })
	})
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		done := make(chan int64)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				close(done)
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			done <- n
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		benchWrite(b, c, func() { c.(*net.TCPConn).CloseWrite(); <-done })
	})
}

// benchWrite writes 256 KiB per iteration; finish must return once the
// receiver has read everything, so the time covers delivery.
func benchWrite(b *testing.B, w io.Writer, finish func()) {
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	finish()
}
