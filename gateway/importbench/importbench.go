// Package importbench measures what programming imports costs a gateway:
// two real gateway processes on loopback, the exporting one with an echo
// server behind its exports, and the importing one receiving N imports
// through its admin API in the chunks the agent sends (JSON, 4000 a
// call). It reports the time until the last apply returned, the
// gateway's CPU and resident memory per import, proves the imports usable
// by an echo through a sample of them, and times deleting them all, once
// per interception mode (steered and a listener per address) so the two
// are compared in one run.
package importbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
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
	for _, m := range c.Intercepts {
		if m != gateway.InterceptSteer && m != gateway.InterceptListeners {
			return fmt.Errorf("intercept %q: must be %s or %s", m, gateway.InterceptSteer, gateway.InterceptListeners)
		}
	}
	if c.Prefix.IsValid() && (!c.Prefix.Addr().Is4() || c.Prefix.Bits() > 30) {
		return fmt.Errorf("prefix %s: want an IPv4 prefix of at least 4 addresses", c.Prefix)
	}
	if c.Prefix.IsValid() && 1<<(32-c.Prefix.Bits())-2 < c.imports() {
		return fmt.Errorf("prefix %s: too small for %d imports", c.Prefix, c.imports())
	}
	return nil
}

func (c *Config) imports() int { return cmp(c.Imports, 20000) }
func (c *Config) chunk() int   { return cmp(c.Chunk, 4000) }
func (c *Config) sample() int  { return min(cmp(c.Sample, 100), c.imports()) }

func cmp(v, def int) int {
	if v == 0 {
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
}

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

func startGateway(binary, dir, pki, cluster, mode string) (*proc, *gateway.AdminClient, error) {
	sock := filepath.Join(dir, cluster+".sock")
	conf := filepath.Join(dir, cluster+".yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "cluster: %s\nidentity: {dir: %s}\nlisten: 127.0.0.1:0\nadmin: %s\nstate: %s\nintercept: %s\n",
		cluster, pki, sock, filepath.Join(dir, cluster+"-state.json"), mode), 0o600); err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, cluster+".log"))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(binary, "gateway", "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
	// The exporting gateway: an export per import, all echoing.
	a, aad, err := startGateway(cfg.Binary, dir, pki, "a", mode)
	if err != nil {
		return r, err
	}
	defer a.stop()
	defer aad.Close()
	exps := []catalog.Resource{allowAll()}
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

	b, bad, err := startGateway(cfg.Binary, dir, pki, "b", mode)
	if err != nil {
		return r, err
	}
	defer b.stop()
	defer bad.Close()
	if _, err := bad.ApplyResources([]catalog.Resource{allowAll(),
		&catalog.Peer{Metadata: catalog.ObjectMeta{Name: "a"}, Spec: catalog.PeerSpec{Gateways: []string{ast.WAN}}}}); err != nil {
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

	pid := b.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond) // the start's garbage collected
	if r.RSSBefore, err = usage.RSS(pid); err != nil {
		return r, err
	}
	addrs := make([]netip.Addr, r.Imports)
	imps := make([]catalog.Resource, r.Imports)
	base := cfg.Prefix.Masked().Addr()
	for i := range imps {
		addrs[i] = nth(base, i+1)
		imps[i] = &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: name(i), Namespace: "bench"},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{addrs[i].String()},
				Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 8080}}, Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}}
	}
	cpu0, err := usage.CPUSeconds(pid)
	if err != nil {
		return r, err
	}
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
		if addr := netip.AddrPortFrom(addrs[i], 8080).String(); load.EchoOnce(addr, []byte("strait import bench "+addr), 5*time.Second) == nil {
			r.Echoed++
		} else if r.Echoed == r.Sampled-1 { // the first failure says why
			cfg.logger().Warn("import not usable", "import", name(i), "addr", addrs[i], "err", err)
		}
	}

	start = time.Now()
	for off := 0; off < len(imps); off += cfg.chunk() {
		if _, err := bad.DeleteResources(imps[off:min(off+cfg.chunk(), len(imps))]); err != nil {
			return r, fmt.Errorf("delete imports: %w", err)
		}
	}
	r.Delete = time.Since(start)
	return r, nil
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
	if len(rs) == 2 && rs[0].Apply > 0 {
		fmt.Fprintf(w, "%s/%s: apply time %.2f, rss per import %.2f\n", rs[1].Intercept, rs[0].Intercept,
			float64(rs[1].Apply)/float64(rs[0].Apply), rs[1].RSSPerImport()/max(rs[0].RSSPerImport(), 1))
	}
}
