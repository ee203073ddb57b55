package quic_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/quic"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

func newQUIC(t testing.TB, pki *tunneltest.PKI) *quic.Transport {
	t.Helper()
	if pki == nil {
		pki = tunneltest.NewPKI(t)
	}
	tr, err := quic.New(quic.Config{ClientTLS: pki.ClientTLS(t, "a"), ServerTLS: pki.ServerTLS(t, "b")})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestConformanceQUIC(t *testing.T) {
	pki := tunneltest.NewPKI(t)
	tunneltest.Conformance(t, func(t *testing.T) (tunnel.Session, tunnel.Session) {
		return tunneltest.Pair(t, newQUIC(t, pki))
	})
}

// TestMalformedHeaderClosesConnection speaks raw QUIC with a stream header
// longer than the maximum: the connection closes with the reason, other
// connections stay up.
func TestMalformedHeaderClosesConnection(t *testing.T) {
	pki := tunneltest.NewPKI(t)
	tr := newQUIC(t, pki)
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good, err := tr.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	goodSrv, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer goodSrv.Close()

	cfg := pki.ClientTLS(t, "evil")
	cfg.NextProtos = []string{"strait-quic/1"}
	raw, err := quicgo.DialAddr(ctx, ln.Addr().String(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	qs, err := raw.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	qs.Write(binary.BigEndian.AppendUint16(nil, 60000))
	select {
	case <-srv.Done():
	case <-ctx.Done():
		t.Fatal("connection not closed after an oversized header")
	}
	<-raw.Context().Done()
	var ae *quicgo.ApplicationError
	if err := context.Cause(raw.Context()); !errors.As(err, &ae) || ae.ErrorCode != 1 {
		t.Fatalf("peer saw %v, want application error 1 with the reason", err)
	}
	t.Logf("peer saw: %v", context.Cause(raw.Context()))
	if good.Err() != nil || goodSrv.Err() != nil {
		t.Fatal("a healthy session died with the malformed one")
	}
}
