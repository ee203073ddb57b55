// Package importbench measures what programming imports costs a gateway:
// two real gateway processes on loopback, the exporting one with an echo
// server behind its exports, and the importing one receiving N imports
// through its admin API in the chunks the agent sends (JSON, 4000 a
// call). It reports the time until the last apply returned, the
// gateway's CPU and resident memory per import, proves the imports usable
// by an echo through a sample of them, and times deleting them all, once
// per interception mode (steered and a listener per address) so the two
// are compared in one run. Meanwhile another client sends keep-alive
// requests through an import that stays, so its latency during the apply
// and the delete is compared with its own idle baseline, and after the
// delete the gateway's descriptors, goroutines and resident memory are
// compared with before the imports (README, "Concurrency limits": a
// gateway under abuse stays responsive and releases everything).
package importbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
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

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/freeport"
	"github.com/strait-net/strait/internal/parentdeath"
	"github.com/strait-net/strait/internal/usage"
	"github.com/strait-net/strait/load"
)

// Config configures a run.
type Config struct {
	Binary     string   // the strait binary the gateways run as
	Imports    int      // imports applied (0: 20000)
	Chunk      int      // imports per admin call (0: 4000, the agent's)
	Sample     int      // imports dialed to prove them usable (0: 100)
	Intercepts []string // modes to run (nil: steer, then listeners)
	// Prefix holds the import addresses, one each (0: 127.60.0.0/16):
	// loopback, so local without any setup.
	Prefix netip.Prefix
	// Pace is the gap between the keep-alive client's requests (0: 2ms)
	// and Baseline how long they run before the first apply, the idle
	// baseline (0: 2s).
	Pace, Baseline time.Duration
	// Settle is how long after the delete the bench waits for the resident
	// memory to come back within 10 % of before the imports (0: it
	// measures once descriptors and goroutines are back, and not longer).
	Settle time.Duration
	Dir    string // keeps configs and logs ("": a removed temp dir)
	Logger *slog.Logger
}

// Validate checks the fields.
func (c *Config) Validate() error {
	if c.Binary == "" {
		return errors.New("binary: the strait binary is required")
	}
	if c.Imports < 0 || c.Chunk < 0 || c.Sample < 0 {
		return fmt.Errorf("imports %d, chunk %d, sample %d: must not be negative", c.Imports, c.Chunk, c.Sample)
	}
	if c.Pace < 0 || c.Baseline < 0 || c.Settle < 0 {
		return fmt.Errorf("pace %v, baseline %v, settle %v: must not be negative", c.Pace, c.Baseline, c.Settle)
	}
	for _, m := range c.Intercepts {
		if m != gateway.InterceptSteer && m != gateway.InterceptListeners {
			return fmt.Errorf("intercept %q: must be %s or %s", m, gateway.InterceptSteer, gateway.InterceptListeners)
		}
	}
	if c.Prefix.IsValid() && (!c.Prefix.Addr().Is4() || c.Prefix.Bits() > 30) {
		return fmt.Errorf("prefix %s: want an IPv4 prefix of at least 4 addresses", c.Prefix)
	}
	if c.Prefix.IsValid() && 1<<(32-c.Prefix.Bits())-2 < c.imports()+1 {
		return fmt.Errorf("prefix %s: too small for %d imports and the one that stays", c.Prefix, c.imports())
	}
	return nil
}

func (c *Config) imports() int { return orDefault(c.Imports, 20000) }
func (c *Config) chunk() int   { return orDefault(c.Chunk, 4000) }
func (c *Config) sample() int  { return min(orDefault(c.Sample, 100), c.imports()) }

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Result is one mode's run.
type Result struct {
	Intercept string // what the gateway reported it uses
	Imports   int
	Calls     int
	// Apply is from the first apply call until the last returned;
	// ApplyCPU the importing gateway's CPU seconds meanwhile.
	Apply    time.Duration
	ApplyCPU float64
	// RSSBefore and RSSAfter are the importing gateway's resident memory
	// before the first apply and after the last.
	RSSBefore, RSSAfter int64
	FDs                 int // the importing gateway's open descriptors with the imports
	Sampled, Echoed     int // imports dialed (up to 5 failures), and those that echoed
	Delete              time.Duration
	Warning             string // the first apply warning (imports not realized)
	// Before is the importing gateway before the first apply, Released
	// after the delete: once its descriptors and goroutines were back (10 s
	// at most) and, with Settle, its RSS within 10 % (Settle at most),
	// ReleasedAfter from the delete's end.
	Before, Released Usage
	ReleasedAfter    time.Duration
	// KeepAlive is the other client's round trips through the import that
	// stays: idle (the baseline), during the apply, during the delete.
	KeepAlive [nPhases]Latency
}

// Usage is what a gateway process holds. Heap (go_memstats_heap_inuse_bytes)
// tells what the RSS holds live or not yet collected from what the runtime
// keeps or has not returned; Reclaims is strait_memory_reclaims_total.
type Usage struct {
	FDs, Goroutines, Reclaims int
	RSS, Heap                 int64
}

// Latency is the keep-alive round trips of one phase.
type Latency struct {
	N, Errors int
	P50, P99  time.Duration
}

// The keep-alive client's phases.
const (
	phaseIdle = iota
	phaseApply
	phaseDelete
	phaseOther // between them: sampled, not reported
	nPhases    = phaseOther
)

var phaseNames = [nPhases]string{"idle", "apply", "delete"}

// RSSPerImport is the resident memory the imports added, per import.
func (r Result) RSSPerImport() float64 {
	return (float64(r.RSSAfter) - float64(r.RSSBefore)) / float64(max(r.Imports, 1))
}

// Run runs every mode and stops every process it started.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = netip.MustParsePrefix("127.60.0.0/16")
	}
	modes := cfg.Intercepts
	if len(modes) == 0 {
		modes = []string{gateway.InterceptSteer, gateway.InterceptListeners}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "strait-import-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if _, err := fabric.InitDir(dir, "importbench", 24*time.Hour, true); err != nil {
		return nil, err
	}
	for _, c := range []string{"a", "b"} {
		if _, err := fabric.IssueFiles(dir, dir, c, 12*time.Hour); err != nil {
			return nil, err
		}
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	go serveEcho(echo)

	var out []Result
	for _, mode := range modes {
		log.Info("import bench", "intercept", mode, "imports", cfg.imports())
		r, err := runMode(ctx, cfg, filepath.Join(dir, mode), dir, mode, echo.Addr().String())
		if err != nil {
			return out, fmt.Errorf("intercept %s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startGateway starts a gateway with its metrics on metrics (a
// host:port), where the bench reads its goroutines.
func startGateway(binary, dir, pki, cluster, mode, metrics string) (*proc, *gateway.AdminClient, error) {
	sock := filepath.Join(dir, cluster+".sock")
	conf := filepath.Join(dir, cluster+".yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "cluster: %s\nidentity: {dir: %s}\nlisten: 127.0.0.1:0\nadmin: %s\nstate: %s\nintercept: %s\nmetrics: %s\n",
		cluster, pki, sock, filepath.Join(dir, cluster+"-state.json"), mode, metrics), 0o600); err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, cluster+".log"))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(binary, "gateway", "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	parentdeath.Kill(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	ad := gateway.NewAdminClient(sock)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := ad.Status(); err == nil {
			return p, ad, nil
		} else if time.Now().After(deadline) {
			p.stop()
			return nil, nil, fmt.Errorf("gateway %s: admin socket: %w (log: %s)", cluster, err, logf.Name())
		}
	}
}

func allowAll() catalog.Resource {
	return &catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: "all"}, Spec: catalog.AccessPolicySpec{Priority: 1, Action: catalog.Allow}}
}

func name(i int) string { return "svc-" + strconv.Itoa(i) }

func runMode(ctx context.Context, cfg Config, dir, pki, mode, target string) (Result, error) {
	r := Result{Imports: cfg.imports()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	// The exporting gateway: an export per import, all echoing, and one
	// for the import that stays.
	a, aad, err := startGateway(cfg.Binary, dir, pki, "a", mode, "")
	if err != nil {
		return r, err
	}
	defer a.stop()
	defer aad.Close()
	exps := []catalog.Resource{allowAll(), &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: stayName, Namespace: "bench"},
		Spec: catalog.ServiceExportSpec{Target: target, Ports: []catalog.ServicePort{{Port: 8080}}}}}
	for i := range r.Imports {
		exps = append(exps, &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: name(i), Namespace: "bench"},
			Spec: catalog.ServiceExportSpec{Target: target, Ports: []catalog.ServicePort{{Port: 8080}}}})
	}
	for off := 0; off < len(exps); off += cfg.chunk() {
		if _, err := aad.ApplyResources(exps[off:min(off+cfg.chunk(), len(exps))]); err != nil {
			return r, fmt.Errorf("exports: %w", err)
		}
	}
	ast, err := aad.Status()
	if err != nil {
		return r, err
	}

	maddr, err := freeport.Addr()
	if err != nil {
		return r, err
	}
	b, bad, err := startGateway(cfg.Binary, dir, pki, "b", mode, maddr)
	if err != nil {
		return r, err
	}
	defer b.stop()
	defer bad.Close()
	base := cfg.Prefix.Masked().Addr()
	stay := netip.AddrPortFrom(nth(base, r.Imports+1), 8080)
	if _, err := bad.ApplyResources([]catalog.Resource{allowAll(),
		&catalog.Peer{Metadata: catalog.ObjectMeta{Name: "a"}, Spec: catalog.PeerSpec{Gateways: []string{ast.WAN}}},
		importOf(stayName, stay.Addr())}); err != nil {
		return r, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := bad.Status()
		if err == nil && len(st.Peers) == 1 && len(st.Peers[0].Live) > 0 {
			r.Intercept = st.Intercept
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return r, fmt.Errorf("no session from b to a: %v", err)
		}
	}

	ka, err := startKeepAlive(stay.String(), orDefault(cfg.Pace, 2*time.Millisecond))
	if err != nil {
		return r, fmt.Errorf("keep-alive client through the import that stays (%s): %w", stay, err)
	}
	defer ka.close()

	pid := b.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond) // the start's garbage collected
	if r.Before, err = measure(pid, maddr); err != nil {
		return r, err
	}
	r.RSSBefore = r.Before.RSS
	addrs := make([]netip.Addr, r.Imports)
	imps := make([]catalog.Resource, r.Imports)
	for i := range imps {
		addrs[i] = nth(base, i+1)
		imps[i] = importOf(name(i), addrs[i])
	}
	ka.phase.Store(phaseIdle)
	time.Sleep(orDefault(cfg.Baseline, 2*time.Second))
	cpu0, err := usage.CPUSeconds(pid)
	if err != nil {
		return r, err
	}
	ka.phase.Store(phaseApply)
	start := time.Now()
	for off := 0; off < len(imps); off += cfg.chunk() {
		res, err := bad.ApplyResources(imps[off:min(off+cfg.chunk(), len(imps))])
		if err != nil {
			return r, fmt.Errorf("apply imports: %w", err)
		}
		if res.Warning != "" && r.Warning == "" {
			r.Warning = res.Warning
		}
		r.Calls++
	}
	r.Apply = time.Since(start)
	ka.phase.Store(phaseOther)
	cpu1, err := usage.CPUSeconds(pid)
	if err != nil {
		return r, err
	}
	r.ApplyCPU = cpu1 - cpu0
	if r.RSSAfter, err = usage.RSS(pid); err != nil {
		return r, err
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r.FDs = len(ents)
	}

	// Usable: an echo through a sample spread over all of them.
	// A gateway out of descriptors leaves connections unanswered: stop
	// after a few failures rather than wait out every dial.
	n := cfg.sample()
	for j := 0; j < n && r.Sampled-r.Echoed < 5 && ctx.Err() == nil; j++ {
		i := j * r.Imports / n
		r.Sampled++
		addr := netip.AddrPortFrom(addrs[i], 8080).String()
		if err := load.EchoOnce(addr, []byte("strait import bench "+addr), 5*time.Second); err == nil {
			r.Echoed++
		} else if r.Echoed == r.Sampled-1 { // the first failure says why
			cfg.logger().Warn("import not usable", "import", name(i), "addr", addrs[i], "err", err)
		}
	}

	ka.phase.Store(phaseDelete)
	start = time.Now()
	for off := 0; off < len(imps); off += cfg.chunk() {
		if _, err := bad.DeleteResources(imps[off:min(off+cfg.chunk(), len(imps))]); err != nil {
			return r, fmt.Errorf("delete imports: %w", err)
		}
	}
	r.Delete = time.Since(start)
	ka.phase.Store(phaseOther)
	start = time.Now()
	if r.Released, err = released(ctx, pid, maddr, r.Before, cfg.Settle); err != nil {
		return r, err
	}
	r.ReleasedAfter = time.Since(start)
	ka.close()
	r.KeepAlive = ka.latency()
	return r, nil
}

const stayName = "stay"

func importOf(name string, addr netip.Addr) *catalog.ServiceImport {
	return &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: name, Namespace: "bench"},
		Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{addr.String()},
			Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 8080}}, Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}}
}

// Slack over the start that still counts as released: a metrics scrape's
// connection and its goroutines.
const (
	fdSlack        = 2
	goroutineSlack = 4
)

// released waits until the gateway's descriptors and goroutines are back
// at before (10 s at most) and, with settle, its RSS within 10 % of
// before (settle at most), and returns what it holds then.
func released(ctx context.Context, pid int, metrics string, before Usage, settle time.Duration) (Usage, error) {
	start := time.Now()
	for {
		u, err := measure(pid, metrics)
		if err != nil {
			return u, err
		}
		back := u.FDs <= before.FDs+fdSlack && u.Goroutines <= before.Goroutines+goroutineSlack
		settled := settle == 0 || float64(u.RSS) <= 1.1*float64(before.RSS)
		waited := time.Since(start)
		if (back || waited > 10*time.Second) && (settled || waited > settle) || ctx.Err() != nil {
			return u, ctx.Err()
		}
		// A scrape's garbage is the gateway's too: not more often.
		time.Sleep(time.Second)
	}
}

// measure reads a gateway's descriptors and RSS from /proc and the rest
// from its metrics.
func measure(pid int, metrics string) (Usage, error) {
	var u Usage
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return u, err
	}
	u.FDs = len(ents)
	if u.RSS, err = usage.RSS(pid); err != nil {
		return u, err
	}
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + metrics + "/metrics")
	if err != nil {
		return u, err
	}
	defer resp.Body.Close()
	var goroutines, reclaims int64
	want := map[string]*int64{"go_goroutines": &goroutines, "go_memstats_heap_inuse_bytes": &u.Heap, "strait_memory_reclaims_total": &reclaims}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		if p := want[name]; p != nil {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return u, fmt.Errorf("%s/metrics: %s %q: %w", metrics, name, v, err)
			}
			*p = int64(f)
			delete(want, name)
		}
	}
	if len(want) > 0 {
		return u, fmt.Errorf("%s/metrics: missing %v (%v)", metrics, slices.Collect(maps.Keys(want)), sc.Err())
	}
	u.Goroutines, u.Reclaims = int(goroutines), int(reclaims)
	return u, nil
}

// keepAlive is the client of the import that stays: one connection,
// 64-byte requests Pace apart, each round trip recorded under the phase
// it ended in. A request that fails ends it (counted as an error).
type keepAlive struct {
	phase     atomic.Int32
	mu        sync.Mutex
	lat       [nPhases + 1][]time.Duration
	errs      [nPhases + 1]int
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func startKeepAlive(addr string, pace time.Duration) (*keepAlive, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	k := &keepAlive{stop: make(chan struct{}), done: make(chan struct{})}
	k.phase.Store(phaseOther)
	msg := []byte(strings.Repeat("k", 64))
	if err := k.request(c, msg); err != nil { // usable before the baseline
		c.Close()
		return nil, err
	}
	go func() {
		defer close(k.done)
		defer c.Close()
		t := time.NewTicker(pace)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
			}
			if k.request(c, msg) != nil {
				return
			}
		}
	}()
	return k, nil
}

func (k *keepAlive) request(c net.Conn, msg []byte) error {
	start := time.Now()
	_ = c.SetDeadline(start.Add(10 * time.Second))
	_, err := c.Write(msg)
	if err == nil {
		_, err = io.ReadFull(c, make([]byte, len(msg)))
	}
	d := time.Since(start)
	p := k.phase.Load()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.errs[p]++
	} else {
		k.lat[p] = append(k.lat[p], d)
	}
	return err
}

func (k *keepAlive) close() {
	k.closeOnce.Do(func() { close(k.stop); <-k.done })
}

func (k *keepAlive) latency() [nPhases]Latency {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out [nPhases]Latency
	for p := range out {
		l := slices.Sorted(slices.Values(k.lat[p]))
		out[p] = Latency{N: len(l), Errors: k.errs[p]}
		if len(l) > 0 {
			out[p].P50, out[p].P99 = l[len(l)/2], l[min(len(l)-1, len(l)*99/100)]
		}
	}
	return out
}

func (c *Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

func nth(base netip.Addr, i int) netip.Addr {
	a := base.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// WriteTable prints one line per mode and, with two, the ratios.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-10s %8s %6s %10s %8s %12s %10s %7s %9s %10s %s\n", "intercept", "imports", "calls", "apply", "cpu", "rss/import", "rss", "fds", "usable", "delete", "warning")
	for _, r := range rs {
		warn := r.Warning
		if len(warn) > 100 {
			warn = warn[:100] + "..."
		}
		fmt.Fprintf(w, "%-10s %8d %6d %8dms %7.2fs %10.0f B %7.1fMB %7d %4d/%-4d %8dms %s\n", r.Intercept, r.Imports, r.Calls, r.Apply.Milliseconds(), r.ApplyCPU,
			r.RSSPerImport(), float64(r.RSSAfter)/(1<<20), r.FDs, r.Echoed, r.Sampled, r.Delete.Milliseconds(), warn)
	}
	for _, r := range rs {
		idle := r.KeepAlive[phaseIdle]
		fmt.Fprintf(w, "%s: keep-alive through an import that stays, idle: p50 %v p99 %v (%d requests, %d errors)\n", r.Intercept,
			idle.P50.Round(time.Microsecond), idle.P99.Round(time.Microsecond), idle.N, idle.Errors)
		for _, p := range []int{phaseApply, phaseDelete} {
			l := r.KeepAlive[p]
			fmt.Fprintf(w, "%s: keep-alive during the %-6s: p50 %v (%.2fx idle) p99 %v (%.2fx idle) (%d requests, %d errors)\n", r.Intercept, phaseNames[p],
				l.P50.Round(time.Microsecond), ratio(l.P50, idle.P50), l.P99.Round(time.Microsecond), ratio(l.P99, idle.P99), l.N, l.Errors)
		}
		b, a := r.Before, r.Released
		fmt.Fprintf(w, "%s: %v after the delete: fds %d (%+d), goroutines %d (%+d), rss %.1fMB (%+.1f%%), heap %.1fMB (%+.1f%%), %d reclaims against before the imports\n", r.Intercept,
			r.ReleasedAfter.Round(time.Millisecond), a.FDs, a.FDs-b.FDs, a.Goroutines, a.Goroutines-b.Goroutines, float64(a.RSS)/(1<<20),
			pct(a.RSS, b.RSS), float64(a.Heap)/(1<<20), pct(a.Heap, b.Heap), a.Reclaims-b.Reclaims)
	}
	if len(rs) == 2 && rs[0].Apply > 0 {
		fmt.Fprintf(w, "%s/%s: apply time %.2f, rss per import %.2f\n", rs[1].Intercept, rs[0].Intercept,
			float64(rs[1].Apply)/float64(rs[0].Apply), rs[1].RSSPerImport()/max(rs[0].RSSPerImport(), 1))
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

func pct(v, base int64) float64 { return 100 * (float64(v) - float64(base)) / float64(max(base, 1)) }
