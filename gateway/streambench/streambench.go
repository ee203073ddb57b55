// Package streambench measures what concurrent streams cost a gateway pair
// and what bounds them: two real gateway processes on loopback (one
// importing, one exporting to echo servers in this process), N client
// connections held through the imports, some idle after one echo and some
// echoing 1 KiB at a fixed interval. It reports the gateways' resident
// memory, descriptors and goroutines per idle and per active stream, the
// echo latency of the active streams, the new-connection rate through the
// pair beside the same client dialing the echo servers directly, and,
// optionally, abuse: a flood of new connections past max-streams, clients
// that write and never read and a UDP flood at one import (udpflood.go),
// with the active streams' latency meanwhile and what the gateways
// released afterwards.
package streambench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/freeport"
	"github.com/strait-net/strait/internal/parentdeath"
	"github.com/strait-net/strait/internal/usage"
)

// Config configures a run.
type Config struct {
	Binary string // the strait binary the gateways run as
	Idle   int    // connections held idle after one echo
	Active int    // connections echoing 1 KiB every Interval
	// Interval paces each active connection (0: 1s): on a shared 2-core
	// machine an unpaced echo loop per connection measures the CPU, not
	// the streams.
	Interval time.Duration
	// Hold is how long the active connections echo before the gateways
	// are measured, and how long each abuse lasts at least (0: 3s).
	Hold time.Duration
	// MaxStreams is the gateways' max-streams (0: their default, from the
	// descriptor limit); MaxStreamsExporting the exporting gateway's, if
	// set, so that its refusals of incoming streams can be seen.
	MaxStreams          int
	MaxStreamsExporting int
	// Flood is how many connections at a time try to open past the held
	// ones (stalled ones included), for Hold (0: no flood). With
	// max-streams at Idle+Active+Stalled the gateway must refuse them
	// all, at once.
	Flood int
	// Stalled is how many clients write until their connection blocks and
	// never read (0: none).
	Stalled int
	// UDPFlood is how many client sockets flood a UDP import after the
	// active phase, for Hold (0: no UDP flood), at UDPFloodRate datagrams
	// a second together (0: as fast as they can); a UDP echo client on
	// another UDP import is measured without and during it (udpflood.go).
	UDPFlood, UDPFloodRate int
	// UDPIdle is the gateways' UDP flow idle timeout (0: their default,
	// 30s): the flood's flows, and what they hold, end only after it.
	UDPIdle time.Duration
	// UDPImportRate is the gateways' udp.import-rate, the datagrams per
	// second one import address is read at (0: their default).
	UDPImportRate int
	// RateWorkers dial, echo 64 bytes and close in a loop for RateTime,
	// directly and through the gateways (0: 8 workers, 2s each).
	RateWorkers int
	RateTime    time.Duration
	// Prefix holds the import addresses, one per PerImport connections
	// (0: 127.62.0.0/24): loopback, so local without any setup.
	Prefix    netip.Prefix
	PerImport int // connections per import and echo server (0: 10000), under the ephemeral port range
	// Settle is how long the bench waits, after everything closed, for
	// the gateways' resident memory to come back within 10 % of the start
	// plus SettlePerStream bytes per connection held at the peak, and for
	// each gateway that carried gateway.ReclaimMinPeak connections or more
	// to reclaim (0: it does not wait).
	Settle          time.Duration
	SettlePerStream int
	Dir             string // keeps configs and logs ("": a removed temp dir)
	Logger          *slog.Logger
}

func (c *Config) interval() time.Duration { return cmp(c.Interval, time.Second) }
func (c *Config) hold() time.Duration     { return cmp(c.Hold, 3*time.Second) }
func (c *Config) rateWorkers() int        { return cmp(c.RateWorkers, 8) }
func (c *Config) rateTime() time.Duration { return cmp(c.RateTime, 2*time.Second) }
func (c *Config) perImport() int          { return cmp(c.PerImport, 10000) }
func (c *Config) streams() int            { return c.Idle + c.Active }
func (c *Config) imports() int            { return max(1, (c.streams()+c.perImport()-1)/c.perImport()) }

func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Validate checks the fields.
func (c *Config) Validate() error {
	if c.Binary == "" {
		return errors.New("binary: the strait binary is required")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"idle", c.Idle}, {"active", c.Active}, {"max-streams", c.MaxStreams}, {"max-streams-exporting", c.MaxStreamsExporting}, {"flood", c.Flood}, {"stalled", c.Stalled}, {"udp-flood", c.UDPFlood}, {"udp-flood-rate", c.UDPFloodRate}, {"udp-import-rate", c.UDPImportRate}, {"rate-workers", c.RateWorkers}, {"per-import", c.PerImport}, {"settle-per-stream", c.SettlePerStream}} {
		if f.v < 0 {
			return fmt.Errorf("%s %d: must not be negative", f.name, f.v)
		}
	}
	if c.Interval < 0 || c.Hold < 0 || c.RateTime < 0 || c.Settle < 0 || c.UDPIdle < 0 {
		return fmt.Errorf("interval %v, hold %v, rate time %v, settle %v, udp idle %v: must not be negative", c.Interval, c.Hold, c.RateTime, c.Settle, c.UDPIdle)
	}
	if c.UDPFloodRate > 0 && c.UDPFloodRate < c.UDPFlood {
		return fmt.Errorf("udp-flood-rate %d: at least one datagram a second per flooder (%d)", c.UDPFloodRate, c.UDPFlood)
	}
	if c.PerImport > 20000 {
		return fmt.Errorf("per-import %d: at most 20000, below the ephemeral port range toward one address", c.PerImport)
	}
	if c.Prefix.IsValid() && (!c.Prefix.Addr().Is4() || 1<<(32-c.Prefix.Bits())-2 < c.imports()+2) {
		return fmt.Errorf("prefix %s: want an IPv4 prefix with room for %d imports and two UDP ones", c.Prefix, c.imports())
	}
	return nil
}

// Snapshot is both gateways measured once; index 0 is the importing
// gateway (clients' side), 1 the exporting one (targets' side).
type Snapshot struct {
	Phase   string
	Streams int // connections the bench held through the gateways
	RSS     [2]int64
	Heap    [2]int64 // Go heap in use (go_memstats_heap_inuse_bytes)
	Objects [2]int64 // live and unswept heap objects (go_memstats_heap_objects)
	// Where the rest of the resident memory can sit: heap spans free but
	// not yet returned to the system (heap idle minus released), goroutine
	// stacks, and the heap size at which the next collection starts.
	Retained   [2]int64 // go_memstats_heap_idle_bytes - go_memstats_heap_released_bytes
	Stacks     [2]int64 // go_memstats_stack_inuse_bytes
	NextGC     [2]int64 // go_memstats_next_gc_bytes
	Reclaims   [2]int   // strait_memory_reclaims_total
	FDs        [2]int
	Goroutines [2]int
	Carried    [2]int     // strait_connections_carried
	Refused    [2]float64 // strait_connections_refused_total, every point
	UDPFlows   [2]int     // strait_udp_flows_open
}

// Latency is the active connections' echo round trips in one phase.
type Latency struct {
	Phase         string
	N, Errors     int
	P50, P99, Max time.Duration
}

// Result is a run.
type Result struct {
	NoFile     uint64 // RLIMIT_NOFILE the bench ran with (and its gateways inherited)
	Raised     bool   // the bench raised it
	MaxStreams [2]int // what the gateways reported
	Imports    int
	Snapshots  []Snapshot
	Latency    []Latency
	// New connections per second, same client, same run.
	RateDirect, RateStrait float64
	RateErrors             int
	// The flood: connections tried, refused (reset or closed before an
	// echo), served (echoed), hung (neither within a minute); Counted is
	// what the gateways' refusal counters rose by meanwhile.
	FloodTried, FloodRefused, FloodServed, FloodHung int
	FloodCounted                                     float64
	// StalledBytes is what the non-reading clients wrote before blocking.
	StalledBytes int64
	// SettledAfter is how long after the close the RSS was back within
	// 10 % plus the allowance (or Settle, if it was not).
	SettledAfter time.Duration
	// The UDP flood and the UDP echo client's round trips without it
	// (phase active) and during it.
	UDPFlood UDPFloodResult
	// ActiveCPU is the gateways' CPU over the active phase, in cores,
	// importing then exporting.
	ActiveCPU  [2]float64
	UDPLatency []UDPLatency
	LoadAvg    string // /proc/loadavg at the end
}

// Snapshot returns the named phase's snapshot, or the zero one.
func (r *Result) Snapshot(phase string) Snapshot {
	for _, s := range r.Snapshots {
		if s.Phase == phase {
			return s
		}
	}
	return Snapshot{}
}

// Phases.
const (
	PhaseBase     = "base"
	PhaseIdle     = "idle"
	PhaseActive   = "active"
	PhaseFlood    = "flood"
	PhaseUDPFlood = "udp-flood"
	PhaseStalled  = "stalled"
	PhaseAfter    = "after"
	PhaseSettled  = "settled" // after Settle, or once RSS came back within 10 %
)

// PerStream returns the change of gateway i's RSS, descriptors and
// goroutines from phase from to phase to, per stream opened between them.
func (r *Result) PerStream(i int, from, to string) (rss, fds, goroutines float64) {
	a, b := r.Snapshot(from), r.Snapshot(to)
	n := float64(max(b.Streams-a.Streams, 1))
	return float64(b.RSS[i]-a.RSS[i]) / n, float64(b.FDs[i]-a.FDs[i]) / n, float64(b.Goroutines[i]-a.Goroutines[i]) / n
}

// Run runs the bench and stops every process it started.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = netip.MustParsePrefix("127.62.0.0/24")
	}
	r := &Result{Imports: cfg.imports()}
	// Each held connection costs this process, a gateway and an echo
	// server a descriptor each.
	var err error
	if r.NoFile, r.Raised, err = raiseNoFile(uint64(cfg.streams() + cfg.Flood + cfg.Stalled + 256)); err != nil {
		return r, err
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "strait-stream-bench-")
		if err != nil {
			return r, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	b := &bench{cfg: cfg, r: r, log: cfg.Logger}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	defer b.close()
	if err := b.setup(ctx, dir); err != nil {
		return r, err
	}
	err = b.run(ctx)
	r.LoadAvg = loadAvg()
	return r, err
}

// raiseNoFile raises RLIMIT_NOFILE to at least need, the hard limit too
// if it is lower (which needs CAP_SYS_RESOURCE).
func raiseNoFile(need uint64) (cur uint64, raised bool, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, false, err
	}
	if l.Cur >= need {
		return l.Cur, false, nil
	}
	hard := l.Max
	l.Cur = need
	l.Max = max(l.Max, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, false, fmt.Errorf("raise RLIMIT_NOFILE to %d for the connections asked for: %w (above the hard limit %d needs CAP_SYS_RESOURCE)", need, err, hard)
	}
	return need, true, nil
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(bytes.TrimSpace(b))
}

type bench struct {
	cfg Config
	r   *Result
	log *slog.Logger

	echoes  []*exec.Cmd
	targets []string         // echo server addresses
	imports []netip.AddrPort // one per echo server
	gws     [2]*proc         // importing, exporting
	metrics [2]string        // their /metrics URLs

	udpImports   []netip.AddrPort // the UDP echo's and the flood's (with UDPFlood)
	udpDelivered atomic.Uint64    // datagrams the flood's target read
	udpStop      context.CancelFunc

	mu    sync.Mutex
	held  []net.Conn // every connection the bench holds open
	phase atomic.Int32
	lat   [nPhases][]time.Duration
	errs  [nPhases]int
	stop  chan struct{} // closes the active connections' loops
	wg    sync.WaitGroup
}

// Phases the active connections' latencies are recorded under.
const (
	latActive = iota
	latFlood
	latStalling // the stalled clients still writing
	latStalled  // all of them blocked
	latUDPFlood
	latClosing
	nPhases
)

var latNames = [nPhases]string{PhaseActive, PhaseFlood, "stalling", PhaseStalled, PhaseUDPFlood, "closing"}

func (b *bench) setup(ctx context.Context, dir string) error {
	if _, err := fabric.InitDir(dir, "streambench", 24*time.Hour, true); err != nil {
		return err
	}
	for _, c := range []string{"a", "b"} {
		if _, err := fabric.IssueFiles(dir, dir, c, 12*time.Hour); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	base := b.cfg.Prefix.Masked().Addr()
	for i := range b.r.Imports {
		// Echo servers of their own: descriptors are per process, and
		// without CAP_SYS_RESOURCE the hard limit cannot be raised.
		addr, err := freeport.Addr()
		if err != nil {
			return err
		}
		p, err := startEcho(b.cfg.Binary, dir, addr)
		if err != nil {
			return err
		}
		b.echoes = append(b.echoes, p)
		b.targets = append(b.targets, addr)
		b.imports = append(b.imports, netip.AddrPortFrom(nth(base, i+1), port))
	}
	// The exporting gateway: an export per echo server.
	a, err := startGateway(b.cfg, dir, "a")
	if err != nil {
		return err
	}
	b.gws[1], b.metrics[1] = a, "http://"+a.metrics+"/metrics"
	rs := []catalog.Resource{allowAll()}
	for i, t := range b.targets {
		rs = append(rs, &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: name(i), Namespace: "bench"},
			Spec: catalog.ServiceExportSpec{Target: t, Ports: []catalog.ServicePort{{Port: int32(port)}}}})
	}
	var udpTargets []string
	if b.cfg.UDPFlood > 0 {
		var uctx context.Context
		uctx, b.udpStop = context.WithCancel(context.Background())
		echo, sink, err := b.udpSetup(uctx)
		if err != nil {
			return err
		}
		udpTargets, b.udpImports = []string{echo, sink}, b.udpImportAddrs(port)
		for i, t := range udpTargets {
			rs = append(rs, &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: udpNames[i], Namespace: "bench"},
				Spec: catalog.ServiceExportSpec{Ports: []catalog.ServicePort{{Name: "u", Protocol: catalog.UDP, Port: int32(port), Target: t}}}})
		}
	}
	if _, err := a.admin.ApplyResources(rs); err != nil {
		return fmt.Errorf("exports: %w", err)
	}
	st, err := a.admin.Status()
	if err != nil {
		return err
	}
	g, err := startGateway(b.cfg, dir, "b")
	if err != nil {
		return err
	}
	b.gws[0], b.metrics[0] = g, "http://"+g.metrics+"/metrics"
	rs = []catalog.Resource{allowAll(), &catalog.Peer{Metadata: catalog.ObjectMeta{Name: "a"}, Spec: catalog.PeerSpec{Gateways: []string{st.WAN}}}}
	for i, ap := range b.imports {
		rs = append(rs, &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: name(i), Namespace: "bench"},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{ap.Addr().String()},
				Ports: []catalog.ServicePort{{Name: "echo", Protocol: catalog.TCP, Port: int32(port)}}, Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}})
	}
	for i, ap := range b.udpImports {
		rs = append(rs, &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: udpNames[i], Namespace: "bench"},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{ap.Addr().String()},
				Ports: []catalog.ServicePort{{Name: "u", Protocol: catalog.UDP, Port: int32(port)}}, Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}})
	}
	if _, err := g.admin.ApplyResources(rs); err != nil {
		return fmt.Errorf("imports: %w", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := g.admin.Status()
		if err == nil && len(st.Peers) == 1 && len(st.Peers[0].Live) > 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no session from b to a: %v", err)
		}
	}
	for i := range b.imports {
		if err := echoOnce(b.imports[i].String(), 64); err != nil {
			return fmt.Errorf("import %s: %w", b.imports[i], err)
		}
	}
	return nil
}

func freePort() (uint16, error) {
	a, err := freeport.Addr()
	if err != nil {
		return 0, err
	}
	ap, err := netip.ParseAddrPort(a)
	return ap.Port(), err
}

func (b *bench) close() {
	if b.stop != nil {
		select {
		case <-b.stop:
		default:
			close(b.stop)
		}
	}
	b.closeHeld()
	b.wg.Wait()
	for _, g := range b.gws {
		if g != nil {
			g.stop()
		}
	}
	for _, e := range b.echoes {
		_ = e.Process.Kill()
		_ = e.Wait()
	}
	if b.udpStop != nil {
		b.udpStop()
	}
}

func (b *bench) closeHeld() {
	b.mu.Lock()
	held := b.held
	b.held = nil
	b.mu.Unlock()
	for _, c := range held {
		c.Close()
	}
}

func (b *bench) hold(c net.Conn) {
	b.mu.Lock()
	b.held = append(b.held, c)
	b.mu.Unlock()
}

func (b *bench) run(ctx context.Context) error {
	r, cfg := b.r, b.cfg
	for i := range 2 {
		s, err := b.scrape(i)
		if err != nil {
			return err
		}
		r.MaxStreams[i] = int(s["strait_max_streams"])
	}
	// The rate first, with nothing else running.
	b.log.Info("stream bench: connection rate", "workers", cfg.rateWorkers(), "time", cfg.rateTime())
	var errs int
	r.RateDirect, errs = b.rate(ctx, b.targets)
	r.RateErrors += errs
	addrs := make([]string, len(b.imports))
	for i, a := range b.imports {
		addrs[i] = a.String()
	}
	r.RateStrait, errs = b.rate(ctx, addrs)
	r.RateErrors += errs

	// The base once the rate test's connections are gone.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		s, err := b.measure(PhaseBase, 0)
		if err != nil {
			return err
		}
		if s.Carried == [2]int{} || time.Now().After(deadline) {
			r.Snapshots = append(r.Snapshots, s)
			break
		}
	}
	b.log.Info("stream bench: idle", "connections", cfg.Idle)
	if err := b.open(ctx, 0, cfg.Idle, nil); err != nil {
		return err
	}
	if err := b.snapshot(PhaseIdle, cfg.Idle); err != nil {
		return err
	}
	b.log.Info("stream bench: active", "connections", cfg.Active, "interval", cfg.interval())
	b.stop = make(chan struct{})
	if err := b.open(ctx, cfg.Idle, cfg.Active, b.echoLoop); err != nil {
		return err
	}
	udpErr := make(chan error, 1)
	cpu0, err := b.cpu()
	if err != nil {
		return err
	}
	start := time.Now()
	if cfg.UDPFlood > 0 { // the UDP victim's baseline
		go func() { udpErr <- b.udpEcho(ctx, PhaseActive, cfg.hold()) }()
	} else {
		udpErr <- nil
	}
	if err := errors.Join(b.waitEchoes(ctx, latActive, cfg.hold()), <-udpErr); err != nil {
		return err
	}
	if b.r.ActiveCPU, err = b.cores(cpu0, start); err != nil {
		return err
	}
	if err := b.snapshot(PhaseActive, cfg.streams()); err != nil {
		return err
	}
	if cfg.UDPFlood > 0 {
		b.log.Info("stream bench: udp flood", "sockets", cfg.UDPFlood, "rate", cfg.UDPFloodRate)
		if err := b.udpFlood(ctx); err != nil {
			return err
		}
	}
	if cfg.Stalled > 0 {
		b.log.Info("stream bench: stalled readers", "connections", cfg.Stalled)
		if err := b.stall(ctx); err != nil {
			return err
		}
	}
	if cfg.Flood > 0 {
		b.log.Info("stream bench: flood", "workers", cfg.Flood)
		if err := b.flood(ctx); err != nil {
			return err
		}
		if err := b.snapshot(PhaseFlood, cfg.streams()+cfg.Stalled); err != nil {
			return err
		}
	}
	b.phase.Store(latClosing)
	close(b.stop)
	b.closeHeld()
	b.wg.Wait()
	b.collectLatency()
	return b.released(ctx)
}

// open dials n connections through the imports (connection i to import
// i / PerImport), proves each with an echo, holds them and starts loop on
// each, if set.
func (b *bench) open(ctx context.Context, from, n int, loop func(net.Conn)) error {
	var next atomic.Int64
	next.Store(int64(from))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= from+n {
					return
				}
				c, err := dialEcho(b.imports[i/b.cfg.perImport()%len(b.imports)].String(), 64)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("connection %d: %w", i, err) })
					return
				}
				b.hold(c)
				if loop != nil {
					b.wg.Add(1)
					go func() { defer b.wg.Done(); loop(c) }()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// echoLoop echoes 1 KiB every interval (from a random start, so the
// connections spread over it) until the bench stops, recording each
// round trip under the phase it ended in.
func (b *bench) echoLoop(c net.Conn) {
	msg := make([]byte, 1024)
	got := make([]byte, 1024)
	iv := b.cfg.interval()
	t := time.NewTimer(rand.N(iv))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		t.Reset(iv)
		start := time.Now()
		_ = c.SetDeadline(start.Add(30 * time.Second))
		_, err := c.Write(msg)
		if err == nil {
			_, err = io.ReadFull(c, got)
		}
		d := time.Since(start)
		p := b.phase.Load()
		b.mu.Lock()
		if err != nil {
			b.errs[p]++
		} else {
			b.lat[p] = append(b.lat[p], d)
		}
		b.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// waitEchoes waits at least d and until every active connection echoed
// once in phase p (at most a minute more).
func (b *bench) waitEchoes(ctx context.Context, p int32, d time.Duration) error {
	b.phase.Store(p)
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C:
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		b.mu.Lock()
		n := len(b.lat[p]) + b.errs[p]
		b.mu.Unlock()
		if n >= b.cfg.Active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d active connections echoed within a minute", latNames[p], n, b.cfg.Active)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (b *bench) collectLatency() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p := range latClosing {
		l := b.lat[p]
		if len(l) == 0 && b.errs[p] == 0 {
			continue
		}
		slices.Sort(l)
		q := func(f float64) time.Duration {
			if len(l) == 0 {
				return 0
			}
			return l[min(len(l)-1, int(f*float64(len(l))))]
		}
		b.r.Latency = append(b.r.Latency, Latency{Phase: latNames[p], N: len(l), Errors: b.errs[p], P50: q(0.5), P99: q(0.99), Max: q(1)})
	}
}

// flood has Flood workers open connections through the imports for Hold
// and until every active connection echoed meanwhile: each writes a byte
// and waits for the echo, a reset or an end, at most a minute.
func (b *bench) flood(ctx context.Context) error {
	before, err := b.refusedTotal()
	if err != nil {
		return err
	}
	var tried, refused, served, hung atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range b.cfg.Flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := b.imports[w%len(b.imports)].String()
			for {
				select {
				case <-done:
					return
				default:
				}
				tried.Add(1)
				switch floodOnce(addr) {
				case floodRefused:
					refused.Add(1)
				case floodServed:
					served.Add(1)
				default:
					hung.Add(1)
				}
			}
		}()
	}
	err = b.waitEchoes(ctx, latFlood, b.cfg.hold())
	close(done)
	wg.Wait()
	r := b.r
	r.FloodTried, r.FloodRefused, r.FloodServed, r.FloodHung = int(tried.Load()), int(refused.Load()), int(served.Load()), int(hung.Load())
	after, err2 := b.refusedTotal()
	r.FloodCounted = after - before
	return errors.Join(err, err2)
}

const (
	floodRefused = iota
	floodServed
	floodHung
)

func floodOnce(addr string) int {
	c, err := net.DialTimeout("tcp", addr, time.Minute)
	if err != nil {
		// Refused at the handshake: the listener's backlog was full.
		return floodRefused
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte{1}); err != nil {
		return floodRefused
	}
	var got [1]byte
	_, err = io.ReadFull(c, got[:])
	var ne net.Error
	switch {
	case err == nil:
		return floodServed
	case errors.As(err, &ne) && ne.Timeout():
		return floodHung
	}
	return floodRefused
}

// stall opens Stalled connections that write 64 KiB at a time until a
// write stays blocked for a second, and never read; the active
// connections echo meanwhile. The stalled connections stay open until
// the end.
func (b *bench) stall(ctx context.Context) error {
	var next atomic.Int64
	var written atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	b.phase.Store(latStalling)
	for range min(b.cfg.Stalled, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := make([]byte, 64<<10)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= b.cfg.Stalled {
					return
				}
				c, err := net.DialTimeout("tcp", b.imports[i%len(b.imports)].String(), 30*time.Second)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				b.hold(c)
				for {
					_ = c.SetWriteDeadline(time.Now().Add(time.Second))
					n, err := c.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	b.r.StalledBytes = written.Load()
	if firstErr != nil {
		return firstErr
	}
	if err := b.waitEchoes(ctx, latStalled, b.cfg.hold()); err != nil {
		return err
	}
	return b.snapshot(PhaseStalled, b.cfg.streams()+b.cfg.Stalled)
}

// fdSlack and goroutineSlack are how many descriptors and goroutines more
// than at the start count as released: warm target connections being
// redialed, a metrics scrape.
const (
	fdSlack        = 2
	goroutineSlack = 4
)

// released waits until both gateways carry no connection and no UDP
// flow and hold no more descriptors and goroutines than at the start (a minute at most),
// then takes the last snapshot.
func (b *bench) released(ctx context.Context) error {
	base := b.r.Snapshot(PhaseBase)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		s, err := b.measure(PhaseAfter, 0)
		if err != nil {
			return err
		}
		if (s.Carried == [2]int{} && s.UDPFlows == [2]int{} && s.FDs[0] <= base.FDs[0]+fdSlack && s.FDs[1] <= base.FDs[1]+fdSlack &&
			s.Goroutines[0] <= base.Goroutines[0]+goroutineSlack && s.Goroutines[1] <= base.Goroutines[1]+goroutineSlack) ||
			time.Now().After(deadline) || ctx.Err() != nil {
			b.r.Snapshots = append(b.r.Snapshots, s)
			break
		}
	}
	if b.cfg.Settle <= 0 {
		return ctx.Err()
	}
	// The gateway returns freed memory to the system a few seconds after
	// its connections fell (gateway/reclaim.go); before, only the Go
	// runtime's collection forced every two minutes and its scavenger did:
	// wait for the resident memory to come back within 10 %, plus what is
	// allowed per stream held at the peak.
	start := time.Now()
	peak := int64(b.cfg.streams()+b.cfg.Stalled) * int64(b.cfg.SettlePerStream)
	// A gateway that carried gateway.ReclaimMinPeak connections or more
	// reclaims once they have closed; the settled snapshot waits for that,
	// so it shows what the gateway keeps for good even when its memory came
	// back within the bound before.
	var carried [2]int
	for _, s := range b.r.Snapshots {
		carried[0], carried[1] = max(carried[0], s.Carried[0]), max(carried[1], s.Carried[1])
	}
	settled := func(s Snapshot, i int) bool {
		reclaimed := carried[i] < gateway.ReclaimMinPeak || s.Reclaims[i] > base.Reclaims[i]
		return reclaimed && float64(s.RSS[i]) <= 1.1*float64(base.RSS[i])+float64(peak)
	}
	// Two samples in a row: a reclaim counts itself only after it has
	// returned the memory and measured it (reclaimMemory), so the sample
	// that first sees the memory back may not see the reclaim yet.
	inRow := 0
	for {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		s, err := b.measure(PhaseSettled, 0)
		if err != nil {
			return err
		}
		if settled(s, 0) && settled(s, 1) {
			inRow++
		} else {
			inRow = 0
		}
		if inRow == 2 || time.Since(start) > b.cfg.Settle {
			b.r.Snapshots = append(b.r.Snapshots, s)
			b.r.SettledAfter = time.Since(start)
			return nil
		}
	}
}

func (b *bench) snapshot(phase string, streams int) error {
	s, err := b.measure(phase, streams)
	if err == nil {
		b.r.Snapshots = append(b.r.Snapshots, s)
	}
	return err
}

func (b *bench) measure(phase string, streams int) (Snapshot, error) {
	s := Snapshot{Phase: phase, Streams: streams}
	for i, g := range b.gws {
		m, err := b.scrape(i)
		if err != nil {
			return s, err
		}
		if s.RSS[i], err = usage.RSS(g.cmd.Process.Pid); err != nil {
			return s, err
		}
		s.Heap[i] = int64(m["go_memstats_heap_inuse_bytes"])
		s.Objects[i] = int64(m["go_memstats_heap_objects"])
		s.Retained[i] = int64(m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"])
		s.Stacks[i] = int64(m["go_memstats_stack_inuse_bytes"])
		s.NextGC[i] = int64(m["go_memstats_next_gc_bytes"])
		s.Reclaims[i] = int(m["strait_memory_reclaims_total"])
		s.FDs[i] = int(m["process_open_fds"])
		s.Goroutines[i] = int(m["go_goroutines"])
		s.Carried[i] = int(m["strait_connections_carried"])
		s.Refused[i] = m["strait_connections_refused_total"]
		s.UDPFlows[i] = int(m["strait_udp_flows_open"])
	}
	return s, nil
}

func (b *bench) refusedTotal() (float64, error) {
	var sum float64
	for i := range b.gws {
		m, err := b.scrape(i)
		if err != nil {
			return 0, err
		}
		sum += m["strait_connections_refused_total"]
	}
	return sum, nil
}

// families reads gateway i's metrics.
func (b *bench) families(i int) (map[string]*dto.MetricFamily, error) {
	cl := http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(b.metrics[i])
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.metrics[i], err)
	}
	return fams, nil
}

// scrape reads gateway i's metrics: each family's samples summed.
func (b *bench) scrape(i int) (map[string]float64, error) {
	fams, err := b.families(i)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Untyped != nil:
				out[name] += m.Untyped.GetValue()
			}
		}
	}
	return out, nil
}

// rate dials, echoes 64 bytes and closes in a loop from RateWorkers
// workers for RateTime, spreading over addrs; it returns connections per
// second and the failures. Every worker finishes at least one connection,
// even one that first runs after RateTime (a stalled host): the rate is
// then that count over the time it took, not 0.
func (b *bench) rate(ctx context.Context, addrs []string) (float64, int) {
	var ok, failed atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, b.cfg.rateTime())
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range b.cfg.rateWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i == w || ctx.Err() == nil; i++ {
				if err := echoOnce(addrs[i%len(addrs)], 64); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), int(failed.Load())
}

func dialEcho(addr string, n int) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := bytes.Repeat([]byte{'s'}, n)
	got := make([]byte, n)
	if _, err := c.Write(msg); err == nil {
		_, err = io.ReadFull(c, got)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func echoOnce(addr string, n int) error {
	c, err := dialEcho(addr, n)
	if err == nil {
		c.Close()
	}
	return err
}

// EchoArg is the argument after the binary that runs ServeEcho
// (cmd/strait wires it); the address follows.
var EchoArg = []string{"gateway", "bench-streams-echo", "--listen"}

// ServeEcho echoes every connection to addr until ctx ends, with a small
// buffer each: the bench holds tens of thousands, and io.Copy's 32 KiB
// each would make the echo servers the machine's largest memory user.
func ServeEcho(ctx context.Context, addr string) error {
	if err := raiseSoftNoFile(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Out of descriptors: the bench sees its dials fail.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 2048)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// raiseSoftNoFile is what the Go runtime does at start (soft limit up to
// the hard one); said here for processes whose parent lowered it.
func raiseSoftNoFile() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	l.Cur = l.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

func startEcho(binary, dir, addr string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(dir, "echo-"+strings.ReplaceAll(addr, ":", "-")+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(binary, append(slices.Clone(EchoArg), addr)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	parentdeath.Kill(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := echoOnce(addr, 8)
		if err == nil {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("echo server %s: %w (log: %s)", addr, err, logf.Name())
		}
	}
}

type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	admin   *gateway.AdminClient
	metrics string
}

func (p *proc) stop() {
	p.admin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func startGateway(cfg Config, dir, cluster string) (*proc, error) {
	limit := cfg.MaxStreams
	if cluster == "a" && cfg.MaxStreamsExporting != 0 {
		limit = cfg.MaxStreamsExporting
	}
	sock := filepath.Join(dir, cluster+".sock")
	conf := filepath.Join(dir, cluster+".yaml")
	maddr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	conf0 := fmt.Appendf(nil, "cluster: %s\nidentity: {dir: %s}\nlisten: 127.0.0.1:0\nadmin: %s\nstate: %s\nintercept: listeners\nmetrics: %s\n",
		cluster, dir, sock, filepath.Join(dir, cluster+"-state.json"), maddr)
	if limit != 0 {
		conf0 = fmt.Appendf(conf0, "max-streams: %d\n", limit)
	}
	if cfg.UDPIdle != 0 || cfg.UDPImportRate != 0 {
		conf0 = fmt.Appendf(conf0, "udp: {idle-timeout: %s, import-rate: %d}\n", cfg.UDPIdle, cfg.UDPImportRate)
	}
	if err := os.WriteFile(conf, conf0, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, cluster+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Binary, "gateway", "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	parentdeath.Kill(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), admin: gateway.NewAdminClient(sock), metrics: maddr}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("gateway %s exited while starting: %v; its log:\n%s", cluster, cmd.ProcessState, log)
		default:
		}
		_, err := p.admin.Status()
		if err == nil {
			// The metrics listener opens after the admin socket.
			var resp *http.Response
			if resp, err = http.Get("http://" + maddr + "/metrics"); err == nil {
				resp.Body.Close()
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("gateway %s: %w (log: %s)", cluster, err, logf.Name())
		}
	}
}

func allowAll() catalog.Resource {
	return &catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: "all"}, Spec: catalog.AccessPolicySpec{Priority: 1, Action: catalog.Allow}}
}

func name(i int) string { return "echo-" + strconv.Itoa(i) }

var udpNames = []string{"udp-echo", "udp-flood"}

func nth(base netip.Addr, i int) netip.Addr {
	a := base.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

var gwNames = [2]string{"importing", "exporting"}

// WriteTable prints the snapshots, the figures per stream, the latencies,
// the connection rates and the abuse's outcome.
func WriteTable(w io.Writer, r *Result) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "RLIMIT_NOFILE %d (raised by the bench: %v), max-streams %d/%d (importing/exporting), %d imports\n",
		r.NoFile, r.Raised, r.MaxStreams[0], r.MaxStreams[1], r.Imports)
	fmt.Fprintf(w, "%-10s %-8s %8s %9s %9s %9s %9s %9s %9s %7s %10s %8s %8s %8s\n", "gateway", "phase", "streams", "rss", "heap", "retained", "stacks", "next-gc", "objects", "fds", "goroutines", "carried", "refused", "reclaims")
	mb := func(v int64) float64 { return float64(v) / (1 << 20) }
	for i := range 2 {
		for _, s := range r.Snapshots {
			fmt.Fprintf(w, "%-10s %-8s %8d %7.1fMB %7.1fMB %7.1fMB %7.1fMB %7.1fMB %9d %7d %10d %8d %8.0f %8d\n", gwNames[i], s.Phase, s.Streams,
				mb(s.RSS[i]), mb(s.Heap[i]), mb(s.Retained[i]), mb(s.Stacks[i]), mb(s.NextGC[i]), s.Objects[i], s.FDs[i], s.Goroutines[i], s.Carried[i], s.Refused[i], s.Reclaims[i])
		}
	}
	per := func(label, from, to string) {
		if r.Snapshot(to).Streams-r.Snapshot(from).Streams <= 0 {
			return
		}
		for i := range 2 {
			rss, fds, gr := r.PerStream(i, from, to)
			fmt.Fprintf(w, "per %-7s stream, %-9s: %7.1f KiB rss, %.2f fds, %.2f goroutines\n", label, gwNames[i], rss/1024, fds, gr)
		}
	}
	per("idle", PhaseBase, PhaseIdle)
	per("active", PhaseIdle, PhaseActive)
	per("stalled", PhaseActive, PhaseStalled)
	for _, l := range r.Latency {
		fmt.Fprintf(w, "echo 1 KiB during %-8s: %6d round trips, p50 %v p99 %v max %v, %d errors\n", l.Phase, l.N,
			l.P50.Round(time.Microsecond), l.P99.Round(time.Microsecond), l.Max.Round(time.Microsecond), l.Errors)
	}
	if r.RateDirect > 0 {
		fmt.Fprintf(w, "new connections/s: direct %.0f, through the gateways %.0f (ratio %.2f), %d failed\n",
			r.RateDirect, r.RateStrait, r.RateStrait/r.RateDirect, r.RateErrors)
	}
	if r.FloodTried > 0 {
		fmt.Fprintf(w, "flood: %d connections tried, %d refused, %d served, %d hung; gateways counted %.0f refusals\n",
			r.FloodTried, r.FloodRefused, r.FloodServed, r.FloodHung, r.FloodCounted)
	}
	for _, l := range r.UDPLatency {
		fmt.Fprintf(w, "udp echo %d/s during %-9s: %6d of %d echoed, p50 %v p99 %v max %v\n", udpEchoRate, l.Phase, l.Received, l.Sent,
			l.P50, l.P99, l.Max)
	}
	if f := r.UDPFlood; f.Sent > 0 {
		drops := "none"
		if len(f.Drops) > 0 {
			drops = ""
			for _, k := range slices.Sorted(maps.Keys(f.Drops)) {
				drops += fmt.Sprintf(" %s %.0f", k, f.Drops[k])
			}
		}
		fmt.Fprintf(w, "udp flood: %d datagrams of %d bytes sent (%.0f/s, %d refused by the kernel), %d reached the target; the gateways counted drops: %s; host UDP receive-buffer drops +%d\n",
			f.Sent, udpFloodSize, f.Rate, f.SendErrors, f.Delivered, drops, f.HostRcvbufErrors)
		base, act, fl := r.Snapshot(PhaseActive), r.latency(PhaseActive), r.latency(PhaseUDPFlood)
		fmt.Fprintf(w, "udp flood against the active phase: tcp echo p50 %.2fx p99 %.2fx", ratio(fl.P50, act.P50), ratio(fl.P99, act.P99))
		if len(r.UDPLatency) == 2 {
			fmt.Fprintf(w, ", udp echo p50 %.2fx p99 %.2fx", ratio(r.UDPLatency[1].P50, r.UDPLatency[0].P50), ratio(r.UDPLatency[1].P99, r.UDPLatency[0].P99))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "gateways' CPU, importing / exporting: active phase %.2f / %.2f cores, udp flood %.2f / %.2f cores\n",
			r.ActiveCPU[0], r.ActiveCPU[1], f.CPU[0], f.CPU[1])
		if s := r.Snapshot(PhaseUDPFlood); s.Phase != "" {
			for i := range 2 {
				fmt.Fprintf(w, "during the udp flood, %-9s: %d udp flows, against the active phase fds %+d, goroutines %+d, rss %+.1f%%\n", gwNames[i], s.UDPFlows[i],
					s.FDs[i]-base.FDs[i], s.Goroutines[i]-base.Goroutines[i], pct(s.RSS[i], base.RSS[i]))
			}
		}
	}
	if r.StalledBytes > 0 {
		fmt.Fprintf(w, "stalled readers wrote %.1f MB before blocking\n", float64(r.StalledBytes)/(1<<20))
	}
	if a, b := r.Snapshot(PhaseAfter), r.Snapshot(PhaseBase); a.Phase != "" {
		for i := range 2 {
			fmt.Fprintf(w, "released, %-9s: fds %d (base %d), goroutines %d (base %d), rss %+.1f%% of base, heap %+.1f%%\n", gwNames[i],
				a.FDs[i], b.FDs[i], a.Goroutines[i], b.Goroutines[i], pct(a.RSS[i], b.RSS[i]), pct(a.Heap[i], b.Heap[i]))
		}
	}
	if a, b := r.Snapshot(PhaseSettled), r.Snapshot(PhaseBase); a.Phase != "" {
		for i := range 2 {
			fmt.Fprintf(w, "settled %v later, %-9s: rss %+.1f%% of base, heap %+.1f%%\n", r.SettledAfter.Round(time.Second), gwNames[i],
				pct(a.RSS[i], b.RSS[i]), pct(a.Heap[i], b.Heap[i]))
		}
	}
	if r.LoadAvg != "" {
		fmt.Fprintf(w, "load average at the end: %s\n", r.LoadAvg)
	}
}

// latency returns the active connections' round trips of a phase, or
// the zero one.
func (r *Result) latency(phase string) Latency {
	for _, l := range r.Latency {
		if l.Phase == phase {
			return l
		}
	}
	return Latency{}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

func pct(v, base int64) float64 { return 100 * (float64(v) - float64(base)) / float64(max(base, 1)) }
