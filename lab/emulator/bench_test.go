package emulator

import (
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/lab/emulation"
)

// discard is a Device whose Write drops everything, so the benchmark
// measures the engine, not a device.
type discard struct{}

func (discard) Read([][]byte, []int, int) (int, error) { select {} }
func (discard) Write(b [][]byte, _ int) (int, error)   { return len(b), nil }
func (discard) BatchSize() int                         { return 128 }
func (discard) Close() error                           { return nil }

// BenchmarkEnginePacket measures the engine's own cost per packet — the
// shaper's decision, queueing, copying into the write batch and recycling
// the buffer — for 1500-byte packets through the reference
// impairment, in batches of 44 (one 64 KiB TSO super-packet). Devices and
// sleeping are excluded; see the lab for whole-path figures.
func BenchmarkEnginePacket(b *testing.B) {
	p := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.08, Rate: 1e9}
	var now int64
	pm, err := newPump(discard{}, discard{}, newShaper(p, 1, 2), DefaultMTU, func() int64 { return now })
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(pm.wake)
	const batch = 44
	bufs := make([][]byte, batch)
	sizes := make([]int, batch)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range bufs {
		bufs[i] = make([]byte, pm.bufSize)
		for j := range bufs[i] {
			bufs[i][j] = byte(rng.Uint32())
		}
		sizes[i] = 1500
	}
	w := newWriter(128)
	packets := 0
	for b.Loop() {
		now += batch * 12_000 // the link's pace: 12 µs per packet
		pm.enqueue(now, bufs, sizes)
		pm.mu.Lock()
		pm.collect(now+int64(10*time.Millisecond), w)
		pm.mu.Unlock()
		if err := pm.deliver(w); err != nil {
			b.Fatal(err)
		}
		packets += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(packets), "ns/packet")
	b.SetBytes(batch * 1500)
}
