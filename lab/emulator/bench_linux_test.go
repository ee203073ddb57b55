package emulator

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync"
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
	pm := testPump(b, discard{}, discard{}, p, func() int64 { return now })
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
		pm.enqueue(now, bufs, sizes, nil)
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

// stampDevice records when each packet was written, by the pump's clock;
// a packet's first 8 bytes after Headroom carry its index.
type stampDevice struct {
	now clock
	mu  sync.Mutex
	at  map[uint64]int64
}

func (d *stampDevice) Read([][]byte, []int, int) (int, error) { select {} }
func (d *stampDevice) Write(b [][]byte, off int) (int, error) {
	t := d.now()
	d.mu.Lock()
	for _, p := range b {
		d.at[binary.BigEndian.Uint64(p[off:])] = t
	}
	d.mu.Unlock()
	return len(b), nil
}
func (d *stampDevice) BatchSize() int { return 128 }
func (d *stampDevice) Close() error   { return nil }

// BenchmarkRelease runs a pump's writer for real — sleeping, waking and
// writing on its own thread — through a fixed 500 µs delay, and reports
// how late it writes packets after their release (median and 90th
// percentile, ns) and the CPU the whole process spends per packet, which is
// what precise release costs. "sparse" is a probe's pattern: one packet
// every 200 µs, each waking the writer. "burst" is a bulk stream's: 44
// packets of 1500 bytes (a 64 KiB super-packet) every 528 µs, 1 Gbit/s.
func BenchmarkRelease(b *testing.B) {
	const delay = 500 * time.Microsecond
	for _, tc := range []struct {
		name  string
		burst int
		every time.Duration
	}{
		{"sparse", 1, 200 * time.Microsecond},
		{"burst", 44, 528 * time.Microsecond},
	} {
		b.Run(tc.name, func(b *testing.B) {
			now := monotonic()
			dst := &stampDevice{now: now, at: map[uint64]int64{}}
			pm := testPump(b, discard{}, dst, emulation.Params{Delay: delay, Limit: 1 << 20}, now)
			bufs := make([][]byte, tc.burst)
			sizes := make([]int, tc.burst)
			for i := range bufs {
				bufs[i] = make([]byte, pm.bufSize)
				sizes[i] = 1500
			}
			var wg sync.WaitGroup
			wg.Go(pm.writeLoop)
			var aims []int64 // per packet, its release
			var ru0, ru1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
			next := time.Now()
			for b.Loop() {
				t := now()
				aim := t + int64(delay)
				for i := range bufs {
					binary.BigEndian.PutUint64(bufs[i][Headroom:], uint64(len(aims)))
					aims = append(aims, aim)
				}
				pm.enqueue(t, bufs, sizes, nil)
				next = next.Add(tc.every)
				time.Sleep(time.Until(next))
			}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				dst.mu.Lock()
				n := len(dst.at)
				dst.mu.Unlock()
				if n == len(aims) {
					break
				}
			}
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
			pm.stop()
			wg.Wait()
			late := make([]float64, 0, len(aims))
			for i, aim := range aims {
				if at, ok := dst.at[uint64(i)]; ok {
					late = append(late, float64(at-aim))
				}
			}
			if len(late) != len(aims) {
				b.Fatalf("%d of %d packets written", len(late), len(aims))
			}
			slices.Sort(late)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			b.ReportMetric(late[len(late)/2], "late-p50-ns")
			b.ReportMetric(late[len(late)*9/10], "late-p90-ns")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(aims)), "cpu-ns/packet")
		})
	}
}
