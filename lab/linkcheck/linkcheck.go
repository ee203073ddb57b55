// Package linkcheck measures one emulated link between two network
// namespaces — round-trip and one-way delay, jitter, loss, throughput — and
// judges the figures against the impairment the link was configured with.
// The measuring programs run inside the namespaces as hidden subcommands of
// the strait binary (`strait lab probe server|client`), started with
// `ip netns exec`, so no goroutine of this process ever changes namespace.
package linkcheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// Config describes the link to measure and how hard to measure it.
type Config struct {
	Binary                   string           // path of the strait binary to run in the namespaces (os.Executable() in production)
	ClientNetns, ServerNetns string           // "" runs in the caller's namespace
	ServerAddr               netip.Addr       // address of the server namespace reachable over the link
	AtoB, BtoA               emulation.Params // target: A = client side

	Probes      int           // RTT probes; 0 means DefaultProbes
	LossPackets int           // flood datagrams per direction; 0 means DefaultLossPackets
	Bulk        time.Duration // length of each bulk TCP transfer; 0 means DefaultBulk

	// CongestionControl is the bulk sender's TCP congestion control; ""
	// means "bbr", the kernel default here. Loss-based controls such as
	// cubic cannot fill a lossy long link, which is not the link's fault.
	CongestionControl string
	Port              uint16 // server port (UDP and TCP); 0 means DefaultPort
	Logger            *slog.Logger
}

// Defaults for the zero values of Config.
const (
	DefaultProbes      = 1000
	DefaultLossPackets = 200_000
	DefaultBulk        = 5 * time.Second
	DefaultPort        = 47_470
)

func (c Config) withDefaults() Config {
	if c.Probes == 0 {
		c.Probes = DefaultProbes
	}
	if c.LossPackets == 0 {
		c.LossPackets = DefaultLossPackets
	}
	if c.Bulk == 0 {
		c.Bulk = DefaultBulk
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.CongestionControl == "" {
		c.CongestionControl = "bbr"
	}
	return c
}

// Validate reports the first problem, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("binary: must name the strait executable")
	case !c.ServerAddr.IsValid():
		return errors.New("server-addr: must be an IP address")
	case c.Probes < 0 || c.Probes > 1_000_000:
		return fmt.Errorf("probes %d: must be between 0 and 1000000", c.Probes)
	case c.LossPackets < 0 || c.LossPackets > 1<<26:
		return fmt.Errorf("loss-packets %d: must be between 0 and %d", c.LossPackets, 1<<26)
	case c.Bulk < 0 || c.Bulk > time.Hour:
		return fmt.Errorf("bulk %v: must be between 0 and 1h", c.Bulk)
	}
	if err := c.AtoB.Validate(); err != nil {
		return fmt.Errorf("a-to-b: %w", err)
	}
	if err := c.BtoA.Validate(); err != nil {
		return fmt.Errorf("b-to-a: %w", err)
	}
	return nil
}

// Result holds the raw measurements and the targets they are judged by.
type Result struct {
	AtoB, BtoA  emulation.Params
	Probes      int
	ProbeGap    time.Duration
	RTT         RTTReport
	Loss        LossReport
	Up, Down    BulkReport // a-to-b and b-to-a transfers
	LossPPS     int
	ProbeErrors []string // measurements that failed; the rest are still reported
}

// Run starts the server in ServerNetns, runs the measurements from
// ClientNetns one after another (so they do not disturb each other), stops
// the server and returns the figures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	listen := netip.AddrPortFrom(netip.IPv6Unspecified(), cfg.Port)
	if cfg.ServerAddr.Unmap().Is4() {
		listen = netip.AddrPortFrom(netip.IPv4Unspecified(), cfg.Port)
	}
	stopServer, err := startServer(ctx, cfg, listen)
	if err != nil {
		return Result{}, err
	}
	defer stopServer()

	r := Result{AtoB: cfg.AtoB, BtoA: cfg.BtoA, Probes: cfg.Probes}
	maxA, maxB := maxDelay(cfg.AtoB), maxDelay(cfg.BtoA)
	drain := 2*(maxA+maxB) + 500*time.Millisecond

	// Probes are spaced further apart than the spread of the delay in
	// either direction. The emulator keeps packets in order (a packet is
	// never released before the one ahead of it), so a probe sent closer
	// than that behind another could be held back by it, and the measured
	// jitter would be smaller, and the mean larger, than the link's.
	r.ProbeGap = max(time.Millisecond, spread(cfg.AtoB), spread(cfg.BtoA)) + 200*time.Microsecond
	log.Info("measuring round trips", "probes", cfg.Probes, "gap", r.ProbeGap)
	if err := runClient(ctx, cfg, &r.RTT, "--test", "rtt", "--count", strconv.Itoa(cfg.Probes),
		"--interval", r.ProbeGap.String(), "--drain", drain.String()); err != nil {
		r.ProbeErrors = append(r.ProbeErrors, err.Error())
	}

	r.LossPPS = lossPPS(cfg.AtoB, cfg.BtoA)
	log.Info("measuring loss", "packets", cfg.LossPackets, "pps", r.LossPPS)
	if err := runClient(ctx, cfg, &r.Loss, "--test", "loss", "--count", strconv.Itoa(cfg.LossPackets),
		"--pps", strconv.Itoa(r.LossPPS), "--size", strconv.Itoa(lossSize), "--drain", drain.String()); err != nil {
		r.ProbeErrors = append(r.ProbeErrors, err.Error())
	}

	for _, b := range []struct {
		test string
		into *BulkReport
	}{{"bulk-up", &r.Up}, {"bulk-down", &r.Down}} {
		log.Info("measuring throughput", "test", b.test, "duration", cfg.Bulk, "cc", cfg.CongestionControl)
		if err := runClient(ctx, cfg, b.into, "--test", b.test, "--duration", cfg.Bulk.String(), "--cc", cfg.CongestionControl); err != nil {
			r.ProbeErrors = append(r.ProbeErrors, err.Error())
		}
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	return r, nil
}

// lossSize is the flood datagram's UDP payload; with headers it is 76
// bytes of IPv4 on the wire.
const lossSize = probeHeaderLen

// lossPPS keeps the flood well inside the link: a quarter of the slower
// direction's rate, and few enough packets in flight that even the longest
// delay does not fill half the queue (a tail drop is not random loss).
func lossPPS(a, b emulation.Params) int {
	pps := 40_000.0
	wire := float64(lossSize+28) * 8
	for _, p := range []emulation.Params{a, b} {
		if p.Rate != 0 {
			pps = min(pps, float64(p.Rate)/4/wire)
		}
		if d := maxDelay(p); d > 0 {
			pps = min(pps, float64(p.QueueLimit())/2/d.Seconds())
		}
	}
	return max(int(pps), 100)
}

// spread is how far apart two packets' delays can be: the range of the
// jitter distribution.
func spread(p emulation.Params) time.Duration {
	if p.Jitter == 0 {
		return 0
	}
	lo, hi := -1.0, 1.0
	if t := p.Dist().Table(); t != nil {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, v := range t {
			lo, hi = min(lo, float64(v)), max(hi, float64(v))
		}
		lo, hi = lo/emulation.DistScale, hi/emulation.DistScale
	}
	return time.Duration((hi - lo) * float64(p.Jitter))
}

func maxDelay(p emulation.Params) time.Duration {
	return p.Delay + 4*p.Jitter
}

func nsCommand(ctx context.Context, netns, binary string, args ...string) *exec.Cmd {
	if netns == "" {
		return exec.CommandContext(ctx, binary, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns, binary}, args...)...)
}

// startServer runs the probe server and waits for its ready line.
func startServer(ctx context.Context, cfg Config, listen netip.AddrPort) (stop func(), err error) {
	cmd := nsCommand(context.WithoutCancel(ctx), cfg.ServerNetns, cfg.Binary, "lab", "probe", "server", "--listen", listen.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start probe server in %q: %w", cfg.ServerNetns, err)
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			stop()
			return nil, fmt.Errorf("probe server in %q did not start: %s", cfg.ServerNetns, strings.TrimSpace(stderr.String()))
		}
	case <-time.After(10 * time.Second):
		stop()
		return nil, fmt.Errorf("probe server in %q: not ready after 10s", cfg.ServerNetns)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	return stop, nil
}

// runClient runs one client measurement and decodes its JSON report.
func runClient(ctx context.Context, cfg Config, into any, args ...string) error {
	server := netip.AddrPortFrom(cfg.ServerAddr, cfg.Port).String()
	args = append([]string{"lab", "probe", "client", "--server", server}, args...)
	cmd := nsCommand(ctx, cfg.ClientNetns, cfg.Binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("probe client %s: %w: %s", strings.Join(args[5:], " "), err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), into); err != nil {
		return fmt.Errorf("probe client %s: bad report: %w", strings.Join(args[5:], " "), err)
	}
	return nil
}
