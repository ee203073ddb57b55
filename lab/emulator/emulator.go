// Package emulator is strait's userspace link emulator, for kernels without
// netem. An emulated link is a pair of TUN devices, one in each namespace;
// the emulator reads what one namespace routes into its device, impairs it
// with netem's meanings (delay and jitter from netem's distribution tables,
// random loss with netem's correlation, a serializing rate, a queue limit
// with tail drop, FIFO order unless reordering is asked for) and writes it
// into the other device. A link delayed one way only can instead be a veth
// pair whose delayed direction alone detours through the emulator (see
// Link.Veth and detour), so that its other direction pays no thread
// wake-up.
//
// Loss must be real per-packet loss so that TCP reacts to it. The devices
// use IFF_VNET_HDR with TCP segmentation offload: a super-packet the kernel
// hands over is split into MTU-sized packets before anything is decided, so
// one drop never removes a burst, and consecutive packets released together
// are coalesced again on write, which keeps the cost near a third of a core
// per Gbit/s.
//
// A packet's delay runs from when the kernel queued it on the TUN device,
// stamped by an eBPF filter on the device, not from when the emulator's
// reader woke up to read it, which on a virtual machine takes about as
// long as a whole veth hop (see arrivals). It ends when the packet enters
// the receiving namespace's stack, as a netem qdisc's packet enters the
// device at its time: the writer hands each packet to the device ahead of
// its release by what its write takes to get there, learnt from the
// kernel's stamps (see departures and writeLead).
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// Endpoint is one end of a link: a TUN device in a network namespace.
type Endpoint struct {
	Netns  string // name as `ip netns` shows it (a file under /var/run/netns); "" = the caller's namespace
	Device string // interface name to create, ≤ 15 bytes
}

// Link is one emulated point-to-point L3 link.
type Link struct {
	Name       string
	A, B       Endpoint
	AtoB, BtoA emulation.Params
	MTU        int // of both devices; 0 means Config.MTU
	// Veth says that A and B are the ends of a veth pair that exists
	// already, rather than TUN devices to create, and that exactly one
	// direction is delayed (delay or jitter): the emulator carries that
	// direction alone, detoured through a TAP device (see detour), and
	// the kernel the other, without a thread in its way. The caller
	// impairs the undelayed direction, if at all, in the kernel
	// (AttachLoss, tbf).
	Veth bool
}

// delayed is the direction of a Veth link the emulator carries: 0 for
// a-to-b, 1 for b-to-a.
func (l Link) delayed() int {
	if l.AtoB.Undelayed() {
		return 1
	}
	return 0
}

// Config describes every link one emulator process carries.
type Config struct {
	Links     []Link
	MTU       int    // 0 means 1500
	Seed      uint64 // 0 means random; the seed used is logged so runs can be repeated
	ReadyFile string // if set, written once every device exists
	Logger    *slog.Logger
}

// DefaultMTU is the MTU of the devices when Config.MTU is 0.
const DefaultMTU = 1500

func (c Config) mtu() int {
	if c.MTU == 0 {
		return DefaultMTU
	}
	return c.MTU
}

// linkMTU is l's MTU: its own, else the configuration's.
func (c Config) linkMTU(l Link) int {
	if l.MTU != 0 {
		return l.MTU
	}
	return c.mtu()
}

// Validate reports the first problem, naming the field.
func (c Config) Validate() error {
	if len(c.Links) == 0 {
		return errors.New("links: need at least one link")
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65000) {
		return fmt.Errorf("mtu %d: must be between 576 and 65000 (0 means %d)", c.MTU, DefaultMTU)
	}
	names := map[string]bool{}
	devices := map[Endpoint]string{}
	for i, l := range c.Links {
		field := fmt.Sprintf("links[%d]", i)
		if l.MTU != 0 && (l.MTU < 576 || l.MTU > 65000) {
			return fmt.Errorf("%s.mtu %d: must be between 576 and 65000 (0 means the configuration's mtu)", field, l.MTU)
		}
		if l.Name == "" {
			return fmt.Errorf("%s.name: must not be empty", field)
		}
		if names[l.Name] {
			return fmt.Errorf("%s.name %q: used twice", field, l.Name)
		}
		names[l.Name] = true
		for _, e := range []struct {
			side string
			ep   Endpoint
		}{{"a", l.A}, {"b", l.B}} {
			if err := validateNetns(e.ep.Netns); err != nil {
				return fmt.Errorf("%s.%s.netns: %w", field, e.side, err)
			}
			if err := validateDevice(e.ep.Device); err != nil {
				return fmt.Errorf("%s.%s.device: %w", field, e.side, err)
			}
			if other, ok := devices[e.ep]; ok {
				return fmt.Errorf("%s.%s.device %q: already used by %s in the same namespace", field, e.side, e.ep.Device, other)
			}
			devices[e.ep] = field + "." + e.side
		}
		if err := l.AtoB.Validate(); err != nil {
			return fmt.Errorf("%s.a-to-b: %w", field, err)
		}
		if err := l.BtoA.Validate(); err != nil {
			return fmt.Errorf("%s.b-to-a: %w", field, err)
		}
		if l.Veth && l.AtoB.Undelayed() == l.BtoA.Undelayed() {
			return fmt.Errorf("%s.veth: a veth link must be delayed one way only (a-to-b %v, b-to-a %v); a TUN link carries the others", field, l.AtoB, l.BtoA)
		}
	}
	return nil
}

func validateNetns(name string) error {
	if name == "" {
		return nil
	}
	if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: must be a name under /var/run/netns", name)
	}
	return nil
}

// validateDevice follows the kernel's dev_valid_name.
func validateDevice(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 15:
		return fmt.Errorf("%q: must be at most 15 bytes", name)
	case name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\x00"):
		return fmt.Errorf("%q: must not be . or .. or contain '/', ':' or white space", name)
	}
	return nil
}

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
