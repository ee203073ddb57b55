// Package gatewaytest runs gateways inside a test process, for tests of
// packages that drive a gateway through its admin API.
package gatewaytest

import (
	"context"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
)

// patience bounds how long a gateway may take to answer on its admin
// socket; it only ends a hung start, a loaded host needs seconds.
const patience = 30 * time.Second

// Start runs a gateway with cfg until t ends and returns a client of its
// admin socket (cfg.Admin) once that answers. A gateway that ends with an
// error fails t.
func Start(t testing.TB, cfg gateway.Config) *gateway.AdminClient {
	t.Helper()
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway %s: %v", cfg.Cluster, err)
		}
	})
	ad := gateway.NewAdminClient(cfg.Admin)
	for deadline := time.Now().Add(patience); ; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("gateway %s ended before its admin socket answered: %v", cfg.Cluster, err)
		default:
		}
		_, err := ad.Status()
		if err == nil {
			return ad
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s: admin socket %s not answering after %v: %v", cfg.Cluster, cfg.Admin, patience, err)
		}
	}
}
