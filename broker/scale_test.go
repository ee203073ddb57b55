package broker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPublishFanout measures the broker layer alone, in process: six
// clients publish 20 000 exports in total and each waits until it sees all
// the others'. It reports the time per round (ns/op) for comparison with
// sync-scale, which adds gateways and processes.
func BenchmarkPublishFanout(b *testing.B) {
	dir := pki(b, "b1", "c1", "c2", "c3", "c4", "c5", "c6")
	st, err := OpenBolt(filepath.Join(b.TempDir(), "s.db"), 0)
	if err != nil {
		b.Fatal(err)
	}
	srv := startServer(b, dir, "b1", st)
	const n, per = 6, 3334
	cs := make([]*Client, n)
	for i := range cs {
		cs[i], _ = startClient(b, dir, fmt.Sprintf("c%d", i+1), srv.Addr().String())
	}
	round := 0
	for b.Loop() {
		round++
		t0 := time.Now()
		errc := make(chan error, n)
		for i, c := range cs {
			go func() {
				_, err := c.Publish(ctxT(b), ClusterState{Exports: exportsN(fmt.Sprintf("r%d-c%d-", round, i), per)})
				errc <- err
			}()
		}
		for range cs {
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
		pub := time.Since(t0)
		for i, c := range cs {
			for j := range cs {
				if i != j {
					key := fmt.Sprintf("default/r%d-c%d-%d", round, j, per-1)
					eventually(b, "fanout", func() bool { return hasExport(c, fmt.Sprintf("c%d", j+1), key) })
				}
			}
		}
		b.Logf("round %d: published in %v, everywhere in %v", round, pub, time.Since(t0))
	}
}
