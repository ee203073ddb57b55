package emulator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// Run creates every device, writes ReadyFile, forwards until ctx is done,
// then closes the devices (which removes them), removes ReadyFile, logs the
// counters and returns after all its goroutines have exited. A clean
// shutdown returns nil. The process should have GOMAXPROCS above the CPU
// count (see the package's command): every direction keeps a locked OS
// thread that sleeps in nanosleep, holding a P meanwhile.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	var devs []Device
	closeAll := func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}
	var drains sync.WaitGroup
	pairs := make([][2]Device, len(cfg.Links))
	for i, l := range cfg.Links {
		if l.Veth {
			from, to := l.A, l.B
			if l.delayed() == 1 {
				from, to = to, from
			}
			d, err := createDetour(from, to, cfg.linkMTU(l))
			if err != nil {
				closeAll()
				drains.Wait()
				return fmt.Errorf("link %s: detour %s in netns %q: %w", l.Name, from.Device, from.Netns, err)
			}
			devs = append(devs, d)
			pairs[i] = [2]Device{d, d}
			continue
		}
		for j, ep := range []Endpoint{l.A, l.B} {
			d, err := createTUN(ep.Netns, ep.Device, cfg.linkMTU(l), &drains)
			if err != nil {
				closeAll()
				drains.Wait()
				return fmt.Errorf("link %s: create %s in netns %q: %w", l.Name, ep.Device, ep.Netns, err)
			}
			devs = append(devs, d)
			pairs[i][j] = d
		}
	}

	e, err := newEngine(cfg, pairs, seed, monotonic())
	if err != nil {
		closeAll()
		drains.Wait()
		return err
	}
	var wg sync.WaitGroup
	wg.Go(e.run)
	log.Info("emulator running", "links", len(cfg.Links), "mtu", cfg.mtu(), "seed", seed)

	if cfg.ReadyFile != "" {
		if err = writeReady(cfg.ReadyFile); err != nil {
			err = fmt.Errorf("ready file: %w", err)
		}
	}
	if err == nil {
		<-ctx.Done()
	}
	e.stop()
	closeAll()
	wg.Wait()
	drains.Wait()
	if cfg.ReadyFile != "" && err == nil {
		_ = os.Remove(cfg.ReadyFile)
	}
	for k, p := range e.pumps {
		l, dir := cfg.Links[e.of[k].link], []string{"a-to-b", "b-to-a"}[e.of[k].dir]
		s := p.c.snapshot()
		log.Info("link counters", "link", l.Name, "direction", dir,
			"packets_in", s.PacketsIn, "bytes_in", s.BytesIn,
			"packets_out", s.PacketsOut, "bytes_out", s.BytesOut,
			"dropped_loss", s.DroppedLoss, "dropped_limit", s.DroppedLimit,
			"read_errors", s.ReadErrors, "write_errors", s.WriteErrors, "batches", s.Batches,
			"on_time", s.OnTime, "late", s.Late, "direct", s.Direct, "unstamped", s.Unstamped,
			"write_time", time.Duration(s.WriteTime),
			"write_lead", time.Duration(p.lead.get()))
	}
	return err
}

// writeReady creates the file by renaming, so a reader never sees it half
// written.
func writeReady(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// engine runs the pumps of every link: two for a TUN link, one for a
// Veth link's delayed direction.
type engine struct {
	pumps []*pump
	of    []pumpOf // per pump, what it carries
}

// pumpOf names a pump's link (an index in Config.Links) and direction (0:
// a-to-b, 1: b-to-a).
type pumpOf struct{ link, dir int }

// newEngine wires pairs[i] = {A, B} of links[i]; for a Veth link both are
// its detour, and only its delayed direction gets a pump. Direction d of
// link i draws from its own random stream, seeded by (seed, 2i+d), so one
// link's traffic does not change another's random decisions.
func newEngine(cfg Config, pairs [][2]Device, seed uint64, now clock) (*engine, error) {
	e := &engine{}
	for i, l := range cfg.Links {
		mtu := cfg.linkMTU(l)
		a, b := pairs[i][0], pairs[i][1]
		for d, dir := range []struct {
			src, dst Device
			p        emulation.Params
		}{{a, b, l.AtoB}, {b, a, l.BtoA}} {
			if l.Veth && d != l.delayed() {
				continue
			}
			p, err := newPump(dir.src, dir.dst, newShaper(dir.p, seed, uint64(2*i+d)), mtu, now)
			if err != nil {
				for _, p := range e.pumps {
					p.close()
				}
				return nil, err
			}
			e.pumps = append(e.pumps, p)
			e.of = append(e.of, pumpOf{i, d})
		}
	}
	return e, nil
}

// run returns when every pump has stopped: after stop and after the
// devices are closed.
func (e *engine) run() {
	var wg sync.WaitGroup
	for _, p := range e.pumps {
		wg.Go(p.run)
	}
	wg.Wait()
}

func (e *engine) stop() {
	for _, p := range e.pumps {
		p.stop()
	}
}
