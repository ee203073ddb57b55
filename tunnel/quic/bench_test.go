package quic_test

import (
	"context"
	"crypto/tls"
	"io"
	"testing"

	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// BenchmarkTransports compares, in one run on loopback, single-stream
// throughput and stream-open round trips of the TLS multiplexer, raw TLS
// (the ceiling for the multiplexer) and QUIC.
func BenchmarkTransports(b *testing.B) {
	pki := tunneltest.NewPKI(b)
	mux, err := tunnel.NewTLS(tunnel.Config{ClientTLS: pki.ClientTLS(b, "a"), ServerTLS: pki.ServerTLS(b, "b")})
	if err != nil {
		b.Fatal(err)
	}
	transports := []struct {
		name string
		tr   tunnel.Transport
	}{{"mux", mux}, {"quic", newQUIC(b, pki)}}

	for _, tc := range transports {
		b.Run("throughput/"+tc.name, func(b *testing.B) {
			client, server := tunneltest.Pair(b, tc.tr)
			done := make(chan struct{})
			go func() {
				defer close(done)
				st, err := server.AcceptStream(context.Background())
				if err == nil {
					io.Copy(io.Discard, st)
				}
			}()
			st, err := client.OpenStream(context.Background(), nil)
			if err != nil {
				b.Fatal(err)
			}
			write(b, st, func() { st.CloseWrite(); <-done })
		})
	}
	b.Run("throughput/tls", func(b *testing.B) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", pki.ServerTLS(b, "b"))
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err == nil {
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), pki.ClientTLS(b, "a"))
		if err != nil {
			b.Fatal(err)
		}
		write(b, c, func() { c.CloseWrite(); <-done })
	})
	for _, tc := range transports {
		b.Run("open-roundtrip/"+tc.name, func(b *testing.B) {
			client, server := tunneltest.Pair(b, tc.tr)
			go func() {
				for {
					st, err := server.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() { io.Copy(st, st); st.Close() }()
				}
			}()
			buf := []byte{1}
			for b.Loop() {
				st, err := client.OpenStream(context.Background(), []byte("export=web.prod"))
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
		})
	}
}

func write(b *testing.B, w io.Writer, finish func()) {
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	finish()
}
