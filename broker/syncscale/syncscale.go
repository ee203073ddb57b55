// Package syncscale is the broker layer's scale experiment (seed 003 §6.3.2;
// README, "Brokers and agents"): several clusters, each a real gateway and
// agent process, create tens of thousands of exports through their gateways'
// admin API as fast as it accepts them, and every agent records when each
// remote export reaches it. It reports the time from an export's creation
// until it is visible in every other cluster, the time until all exports are
// everywhere, the brokers' CPU seconds and peak memory, and the bytes agents
// and brokers exchanged; optionally it kills a broker mid-run and reports
// the stall.
package syncscale

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// Config is one run.
type Config struct {
	// Binary is the strait binary to run brokers, gateways and agents.
	Binary string
	// Etcd is the etcd binary (needed when Store is "etcd").
	Etcd string
	// Dir holds configs, stores and traces (a temp dir if empty).
	Dir string
	// Clusters, Services (in total, spread evenly), Brokers.
	Clusters, Services, Brokers int
	// Store is "bolt" (one broker only) or "etcd"; default bolt for one
	// broker, etcd for more.
	Store string
	// Batch is how many exports one admin API call creates (default 500).
	Batch int
	// Kill kills the broker with the most agents once half the exports
	// are created.
	Kill bool
	// Poll is the agents' export poll interval (default 50ms).
	Poll time.Duration
	// Timeout bounds the wait for all exports everywhere (default 5m).
	Timeout time.Duration
	// Imports makes every agent apply an import for each remote export to
	// its gateway (import-prefix 127.<20+i>.0.0/16, so each import gets a
	// loopback address); the run then also waits until every gateway has
	// every remote export imported, and proves a sample of the imports on
	// every gateway usable: an echo through them reaches the echo server
	// every export targets.
	Imports bool
	// Sample is how many imports per gateway the usable check dials (0: 20).
	Sample int
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("binary: required")
	case c.Clusters < 2:
		return errors.New("clusters: at least 2")
	case c.Services < c.Clusters:
		return errors.New("services: at least one per cluster")
	case c.Brokers < 1:
		return errors.New("brokers: at least 1")
	case c.Store != "" && c.Store != "bolt" && c.Store != "etcd":
		return fmt.Errorf("store: %q is not bolt or etcd", c.Store)
	case c.store() == "bolt" && c.Brokers > 1:
		return errors.New("store: bolt serves one broker; several brokers share etcd")
	case c.store() == "etcd" && c.Etcd == "":
		return errors.New("etcd: the etcd binary is required for store etcd")
	case c.Kill && c.Brokers < 2:
		return errors.New("kill: needs at least 2 brokers")
	}
	return nil
}

func (c Config) store() string {
	if c.Store != "" {
		return c.Store
	}
	if c.Brokers > 1 {
		return "etcd"
	}
	return "bolt"
}

// Result is what a run measured. Durations are from an export's creation
// request to the moment an agent received it.
type Result struct {
	Clusters, Services, Brokers int
	Store                       string
	// PerReceiver: latency to each other cluster (services × (clusters−1) samples).
	P50, P99, Max time.Duration
	// Everywhere: latency until the last other cluster has it (one sample per service).
	EverywhereP50, EverywhereP99, EverywhereMax time.Duration
	// BrokerP50/P99/Max: per receiver, from the exporting agent handing the
	// export to its broker client until the receiving agent has it: the
	// broker layer's share, without the export source (gateway API, poll).
	BrokerP50, BrokerP99, BrokerMax time.Duration
	// CreateSpan is from the first creation request to the last creation
	// call's return; AllEverywhere from the first request until every
	// export is in every other cluster.
	CreateSpan, AllEverywhere time.Duration
	// BrokerCPU is user+system seconds of all broker processes during the
	// run; BrokerPeakRSS the largest peak RSS of one broker. Etcd's are
	// reported apart (zero for bolt).
	BrokerCPU, EtcdCPU float64
	// AgentCPU and GatewayCPU are the same for all agents and gateways
	// together: where the rest of the machine's time went.
	AgentCPU, GatewayCPU       float64
	BrokerPeakRSS, EtcdPeakRSS uint64
	// WireIn and WireOut are what agents received and sent on their broker
	// connections, TLS included.
	WireIn, WireOut uint64
	// Killed is the killed broker; Stall the longest time an agent of it
	// was without a broker session after the kill.
	Killed       string
	KilledAgents int
	Stall        time.Duration
	// MaxAround is the worst per-receiver latency of exports created in
	// the second after the kill.
	MaxAround time.Duration
	// With Imports: per receiver, from creation until the receiving
	// agent's apply of the import to its gateway returned (stored and
	// listening); AllImported from the first creation request until every
	// gateway has every remote export imported.
	Imports                         bool
	ImportP50, ImportP99, ImportMax time.Duration
	AllImported                     time.Duration
	// Usable is how many sampled imports echoed, of Sampled (every
	// gateway's, dialed once all were imported).
	Usable, Sampled int
}

// etcdTxnOps is the bench etcd's --max-txn-ops, which the brokers are
// told: a publish of thousands of exports commits in a few transactions
// (each a raft entry and an fsync) instead of one per 127 exports. It
// stays far below etcd's request size limit (1.5 MiB) for these exports.
const etcdTxnOps = 2048

type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
}

// Run runs the experiment and removes every process it started.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "strait-sync-scale-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	res = Result{Clusters: cfg.Clusters, Services: cfg.Services, Brokers: cfg.Brokers, Store: cfg.store(), Imports: cfg.Imports}

	// With imports, every export targets this echo server, so a client
	// of an import in any cluster gets its bytes back.
	target := "127.0.0.1:9"
	if cfg.Imports {
		echo, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		defer echo.Close()
		go serveEcho(echo)
		target = echo.Addr().String()
	}

	var procs []*proc
	defer func() {
		for _, p := range procs {
			stop(p)
		}
	}()
	start := func(name string, args ...string) (*proc, error) {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = f, f
		parentdeath.Kill(cmd)
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		p := &proc{name: name, cmd: cmd, log: f}
		procs = append(procs, p)
		return p, nil
	}

	// Identities.
	pkiDir := filepath.Join(dir, "pki")
	if _, err := fabric.InitDir(pkiDir, "bench", 24*time.Hour, false); err != nil {
		return res, err
	}
	brokerIDs := make([]string, cfg.Brokers)
	for i := range brokerIDs {
		brokerIDs[i] = fmt.Sprintf("broker%d", i+1)
	}
	clusters := make([]string, cfg.Clusters)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("c%d", i+1)
	}
	for _, id := range brokerIDs {
		if _, err := fabric.IssueBrokerFiles(pkiDir, pkiDir, id, 12*time.Hour); err != nil {
			return res, err
		}
	}
	for _, id := range clusters {
		if _, err := fabric.IssueFiles(pkiDir, pkiDir, id, 12*time.Hour); err != nil {
			return res, err
		}
	}

	// Store.
	storeYAML := func(id string) string { return fmt.Sprintf("{path: %s}", filepath.Join(dir, id+".db")) }
	var etcdProc *proc
	if cfg.store() == "etcd" {
		clientAddr, err := freeport.Addr()
		if err != nil {
			return res, err
		}
		peerAddr, err := freeport.Addr()
		if err != nil {
			return res, err
		}
		client, peer := "http://"+clientAddr, "http://"+peerAddr
		etcdProc, err = start("etcd", cfg.Etcd, "--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "bench="+peer, "--log-level", "error",
			"--max-txn-ops", strconv.Itoa(etcdTxnOps))
		if err != nil {
			return res, err
		}
		if err := waitTCP(ctx, strings.TrimPrefix(client, "http://")); err != nil {
			return res, fmt.Errorf("etcd: %w", err)
		}
		storeYAML = func(string) string { return fmt.Sprintf("{etcd: [%s], max-txn-ops: %d}", client, etcdTxnOps) }
	}

	// Brokers.
	brokerAddrs := make([]string, cfg.Brokers)
	brokers := map[string]*proc{}
	for i, id := range brokerIDs {
		if brokerAddrs[i], err = freeport.Addr(); err != nil {
			return res, err
		}
		conf := filepath.Join(dir, id+".yaml")
		if err := os.WriteFile(conf, fmt.Appendf(nil, "id: %s\nidentity: {dir: %s}\nlisten: %s\nstore: %s\n", id, pkiDir, brokerAddrs[i], storeYAML(id)), 0o600); err != nil {
			return res, err
		}
		p, err := start(id, cfg.Binary, "broker", "--config", conf)
		if err != nil {
			return res, err
		}
		brokers[id] = p
	}
	for _, a := range brokerAddrs {
		if err := waitTCP(ctx, a); err != nil {
			return res, fmt.Errorf("broker %s: %w", a, err)
		}
	}

	// Gateways and agents.
	admins := make([]*gateway.AdminClient, len(clusters))
	gateways := make([]*proc, len(clusters))
	traces := make([]string, len(clusters))
	agents := make([]*proc, len(clusters))
	for i, c := range clusters {
		sock := filepath.Join(dir, c+".sock")
		wan, err := freeport.Addr()
		if err != nil {
			return res, err
		}
		gconf := filepath.Join(dir, c+"-gateway.yaml")
		if err := os.WriteFile(gconf, fmt.Appendf(nil, "cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\npreconnect: -1\n",
			c, pkiDir, wan, sock, filepath.Join(dir, c+"-state.json")), 0o600); err != nil {
			return res, err
		}
		if gateways[i], err = start(c+"-gateway", cfg.Binary, "gateway", "--config", gconf); err != nil {
			return res, err
		}
		admins[i] = gateway.NewAdminClient(sock)
		traces[i] = filepath.Join(dir, c+".trace")
		aconf := filepath.Join(dir, c+"-agent.yaml")
		imports := ""
		if cfg.Imports {
			imports = fmt.Sprintf("import-prefix: 127.%d.0.0/16\n", 20+i)
		}
		if err := os.WriteFile(aconf, fmt.Appendf(nil, "cluster: %s\nidentity: {dir: %s}\nbrokers: [%s]\ngateway: %s\ngateways: [%s]\npoll: %s\ntrace: %s\n%s",
			c, pkiDir, strings.Join(brokerAddrs, ", "), sock, wan, cfg.Poll, traces[i], imports), 0o600); err != nil {
			return res, err
		}
		if err := waitAdmin(ctx, admins[i]); err != nil {
			return res, fmt.Errorf("gateway %s: %w", c, err)
		}
		if cfg.Imports {
			if _, err := admins[i].ApplyResources([]catalog.Resource{&catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: "all"},
				Spec: catalog.AccessPolicySpec{Priority: 1, Action: catalog.Allow}}}); err != nil {
				return res, fmt.Errorf("gateway %s: %w", c, err)
			}
		}
		if agents[i], err = start(c+"-agent", cfg.Binary, "agent", "--config", aconf); err != nil {
			return res, err
		}
	}
	// Settle: every agent on a broker, the assignment stable.
	var conns map[string]string
	for stable, last := 0, ""; stable < 10; {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
		conns = map[string]string{}
		for i, t := range traces {
			if b := lastConnect(t); b != "" {
				conns[clusters[i]] = b
			}
		}
		s := fmt.Sprint(conns)
		if len(conns) == len(clusters) && s == last {
			stable++
		} else {
			stable = 0
		}
		last = s
	}
	log.Info("agents connected", "brokers", conns)

	cpu0 := map[*proc]float64{}
	for _, p := range append(append(append(procsOf(brokers), etcdProc), agents...), gateways...) {
		if p != nil {
			c, err := usage.CPUSeconds(p.cmd.Process.Pid)
			if err != nil {
				return res, err
			}
			cpu0[p] = c
		}
	}
	peak := newPeakWatcher(append(procsOf(brokers), etcdProc))
	defer peak.stop()

	// Create exports as fast as the gateways accept them.
	per := cfg.Services / cfg.Clusters
	created := make([]map[string]time.Time, len(clusters)) // cluster → export → request time
	var wg sync.WaitGroup
	var createErr error
	var mu sync.Mutex
	t0 := time.Now()
	half := make(chan struct{})
	var halfOnce sync.Once
	var done int
	var lastCreate time.Time
	for i := range clusters {
		n := per
		if i < cfg.Services%cfg.Clusters {
			n++
		}
		created[i] = make(map[string]time.Time, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := 0; off < n; off += cfg.Batch {
				m := min(cfg.Batch, n-off)
				rs := make([]catalog.Resource, m)
				names := make([]string, m)
				for j := range m {
					names[j] = fmt.Sprintf("s%d-%d", i+1, off+j)
					rs[j] = &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: names[j], Namespace: "bench"},
						Spec: catalog.ServiceExportSpec{Target: target, Ports: []catalog.ServicePort{{Port: 8080}}}}
				}
				at := time.Now()
				if _, err := admins[i].ApplyResources(rs); err != nil {
					mu.Lock()
					createErr = err
					mu.Unlock()
					return
				}
				end := time.Now()
				mu.Lock()
				for _, nm := range names {
					created[i]["bench/"+nm] = at
				}
				done += m
				if end.After(lastCreate) {
					lastCreate = end
				}
				if done >= cfg.Services/2 {
					halfOnce.Do(func() { close(half) })
				}
				mu.Unlock()
			}
		}()
	}
	var killAt time.Time
	if cfg.Kill {
		select {
		case <-half:
		case <-ctx.Done():
		}
		count := map[string]int{}
		for i, t := range traces {
			if b := lastConnect(t); b != "" {
				count[b]++
				conns[clusters[i]] = b
			}
		}
		victim := ""
		for _, id := range brokerIDs {
			if victim == "" || count[id] > count[victim] {
				victim = id
			}
		}
		p := brokers[victim]
		peak.sample()
		c, err := usage.CPUSeconds(p.cmd.Process.Pid)
		if err != nil {
			return res, err
		}
		res.BrokerCPU += c - cpu0[p]
		killAt = time.Now()
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		delete(brokers, victim)
		res.Killed = victim
		for _, b := range conns {
			if b == victim {
				res.KilledAgents++
			}
		}
		log.Info("killed broker", "broker", victim, "agents", count[victim])
	}
	wg.Wait()
	if createErr != nil {
		return res, fmt.Errorf("create exports: %w", createErr)
	}
	res.CreateSpan = lastCreate.Sub(t0)

	// Wait until every agent has every other cluster's exports.
	want := cfg.Services
	seen := make([]map[string]time.Time, len(clusters))     // receiver → "cluster ns/name" → first seen
	pub := make([]map[string]time.Time, len(clusters))      // exporter → "ns/name" → handed to the broker client
	imported := make([]map[string]time.Time, len(clusters)) // receiver → "ns/name" → import applied
	readers := make([]*traceReader, len(clusters))
	for i := range clusters {
		seen[i], pub[i], imported[i] = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
		readers[i] = &traceReader{path: traces[i]}
	}
	deadline := time.Now().Add(cfg.Timeout)
	for {
		complete := true
		for i := range clusters {
			if err := readers[i].read(seen[i], pub[i], imported[i]); err != nil {
				return res, err
			}
			if len(seen[i]) < want-len(created[i]) || cfg.Imports && len(imported[i]) < want-len(created[i]) {
				complete = false
			}
		}
		if complete {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			counts, imps := make([]int, len(clusters)), make([]int, len(clusters))
			for i := range seen {
				counts[i], imps[i] = len(seen[i]), len(imported[i])
			}
			return res, fmt.Errorf("not everywhere after %s: receivers have %v of %d remote exports each (imported: %v)", cfg.Timeout, counts, want-per, imps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	isAgent, isGateway := map[*proc]bool{}, map[*proc]bool{}
	for i := range agents {
		isAgent[agents[i]], isGateway[gateways[i]] = true, true
	}
	for p, c0 := range cpu0 {
		if p.cmd.ProcessState != nil {
			continue // the killed broker, counted before the kill
		}
		c, err := usage.CPUSeconds(p.cmd.Process.Pid)
		if err != nil {
			return res, err
		}
		d := c - c0
		switch {
		case p == etcdProc:
			res.EtcdCPU = d
		case isAgent[p]:
			res.AgentCPU += d
		case isGateway[p]:
			res.GatewayCPU += d
		default:
			res.BrokerCPU += d
		}
	}
	peak.sample()
	for p, v := range peak.peaks() {
		if p == etcdProc {
			res.EtcdPeakRSS = v
		} else {
			res.BrokerPeakRSS = max(res.BrokerPeakRSS, v)
		}
	}

	// Latencies.
	var lat, every, brk, imp []time.Duration
	var last, lastImp time.Time
	for i := range clusters {
		for key, at := range created[i] {
			worst := time.Duration(0)
			for r := range clusters {
				if r == i {
					continue
				}
				s, ok := seen[r][clusters[i]+" "+key]
				if !ok {
					return res, fmt.Errorf("%s never saw %s of %s", clusters[r], key, clusters[i])
				}
				d := s.Sub(at)
				lat = append(lat, d)
				if p, ok := pub[i][key]; ok {
					brk = append(brk, s.Sub(p))
				}
				worst = max(worst, d)
				if s.After(last) {
					last = s
				}
				if cfg.Imports {
					ia, ok := imported[r][key]
					if !ok {
						return res, fmt.Errorf("%s never imported %s of %s", clusters[r], key, clusters[i])
					}
					imp = append(imp, ia.Sub(at))
					if ia.After(lastImp) {
						lastImp = ia
					}
				}
				if !killAt.IsZero() && at.After(killAt) && at.Before(killAt.Add(time.Second)) {
					res.MaxAround = max(res.MaxAround, d)
				}
			}
			every = append(every, worst)
		}
	}
	res.P50, res.P99, res.Max = quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1)
	res.EverywhereP50, res.EverywhereP99, res.EverywhereMax = quantile(every, 0.5), quantile(every, 0.99), quantile(every, 1)
	res.BrokerP50, res.BrokerP99, res.BrokerMax = quantile(brk, 0.5), quantile(brk, 0.99), quantile(brk, 1)
	res.AllEverywhere = last.Sub(t0)
	if cfg.Imports {
		res.ImportP50, res.ImportP99, res.ImportMax = quantile(imp, 0.5), quantile(imp, 0.99), quantile(imp, 1)
		res.AllImported = lastImp.Sub(t0)
	}

	// Stall: for each agent of the killed broker, kill → its next session.
	// An agent that had already sent and received everything may reconnect
	// only after the catalog is everywhere (its backoff), so wait for it.
	if !killAt.IsZero() {
		for i, t := range traces {
			if conns[clusters[i]] != res.Killed {
				continue
			}
			for {
				if at, ok := connectAfter(t, killAt); ok {
					res.Stall = max(res.Stall, at.Sub(killAt))
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return res, fmt.Errorf("%s never reconnected after %s was killed (waited %s)", clusters[i], res.Killed, cfg.Timeout)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	if cfg.Imports {
		if err := usable(cfg, admins, &res); err != nil {
			return res, err
		}
	}

	// Wire bytes: agents write their counters to the trace when stopped.
	for i, p := range agents {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
		in, out, ok := stats(traces[i])
		if !ok {
			return res, fmt.Errorf("agent %s wrote no stats", clusters[i])
		}
		res.WireIn += in
		res.WireOut += out
	}
	return res, nil
}

func procsOf(m map[string]*proc) []*proc {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*proc, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

func stop(p *proc) {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	p.log.Close()
}

func waitTCP(ctx context.Context, addr string) error {
	for i := 0; i < 300; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: not listening after 15s", addr)
}

func waitAdmin(ctx context.Context, a *gateway.AdminClient) error {
	var err error
	for i := 0; i < 300; i++ {
		if _, err = a.Status(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

// peakWatcher samples VmHWM of processes, so a killed one's peak is kept.
type peakWatcher struct {
	mu    sync.Mutex
	procs []*proc
	peak  map[*proc]uint64
	quit  chan struct{}
	wg    sync.WaitGroup
}

func newPeakWatcher(ps []*proc) *peakWatcher {
	w := &peakWatcher{peak: map[*proc]uint64{}, quit: make(chan struct{})}
	for _, p := range ps {
		if p != nil {
			w.procs = append(w.procs, p)
		}
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				w.sample()
			}
		}
	}()
	return w
}

func (w *peakWatcher) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.procs {
		if p.cmd.ProcessState == nil {
			v, _ := usage.PeakRSS(p.cmd.Process.Pid) // 0 once it exited: the peak so far stays
			w.peak[p] = max(w.peak[p], uint64(v))
		}
	}
}

func (w *peakWatcher) peaks() map[*proc]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[*proc]uint64{}
	for p, v := range w.peak {
		out[p] = v
	}
	return out
}

func (w *peakWatcher) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	w.wg.Wait()
}

// traceReader reads an agent trace incrementally.
type traceReader struct {
	path string
	off  int64
	rest string
}

// read adds the "put" lines since the last call to seen, the "pub" lines
// to pub and the "imp" lines to imp (first time wins).
func (r *traceReader) read(seen, pub, imp map[string]time.Time) error {
	f, err := os.Open(r.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	r.off += int64(len(data))
	text := r.rest + string(data)
	lines := strings.Split(text, "\n")
	r.rest = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		f := strings.Fields(l)
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		switch {
		case len(f) == 4 && f[1] == "put":
			k := f[2] + " " + f[3]
			if _, ok := seen[k]; !ok {
				seen[k] = time.Unix(0, ns)
			}
		case len(f) == 3 && f[1] == "pub" && pub != nil:
			if _, ok := pub[f[2]]; !ok {
				pub[f[2]] = time.Unix(0, ns)
			}
		case len(f) == 3 && f[1] == "imp" && imp != nil:
			if _, ok := imp[f[2]]; !ok {
				imp[f[2]] = time.Unix(0, ns)
			}
		}
	}
	return nil
}

func traceLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, " connect ") || strings.Contains(l, " stats ") {
			out = append(out, l)
		}
	}
	return out
}

func lastConnect(path string) string {
	b := ""
	for _, l := range traceLines(path) {
		if f := strings.Fields(l); len(f) == 3 && f[1] == "connect" {
			b = f[2]
		}
	}
	return b
}

func connectAfter(path string, t time.Time) (time.Time, bool) {
	for _, l := range traceLines(path) {
		if f := strings.Fields(l); len(f) == 3 && f[1] == "connect" {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			if at := time.Unix(0, ns); at.After(t) {
				return at, true
			}
		}
	}
	return time.Time{}, false
}

func stats(path string) (in, out uint64, ok bool) {
	for _, l := range traceLines(path) {
		if f := strings.Fields(l); len(f) == 5 && f[1] == "stats" {
			in, _ = strconv.ParseUint(f[2], 10, 64)
			out, _ = strconv.ParseUint(f[3], 10, 64)
			ok = true
		}
	}
	return in, out, ok
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// WriteTable prints results as one table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-8s %-5s %-9s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %8s %8s %8s %9s %7s %8s %9s %9s %9s %8s %8s %8s %8s %s\n",
		"brokers", "store", "services", "p50", "p99", "max", "evP50", "evP99", "evMax", "layerP50", "layerP99", "layerMax",
		"create", "all-every", "impP50", "impP99", "impMax", "all-imp", "usable", "brkCPU", "brkPeak", "etcdCPU", "etcdPeak", "agentCPU", "gwCPU", "wireMB", "stall", "killed")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/1e6) }
	for _, r := range rs {
		killed := "-"
		stall := "-"
		if r.Killed != "" {
			killed = fmt.Sprintf("%s(%d agents, max lat after kill %s)", r.Killed, r.KilledAgents, ms(r.MaxAround))
			stall = ms(r.Stall)
		}
		imp := [5]string{"-", "-", "-", "-", "-"}
		if r.Imports {
			imp = [5]string{ms(r.ImportP50), ms(r.ImportP99), ms(r.ImportMax), ms(r.AllImported), fmt.Sprintf("%d/%d", r.Usable, r.Sampled)}
		}
		fmt.Fprintf(w, "%-8d %-5s %-9d %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %8s %8s %8s %9s %7s %7.2fs %8.0fMB %8.2fs %8.0fMB %7.2fs %7.2fs %8.1f %8s %s\n",
			r.Brokers, r.Store, r.Services, ms(r.P50), ms(r.P99), ms(r.Max), ms(r.EverywhereP50), ms(r.EverywhereP99), ms(r.EverywhereMax),
			ms(r.BrokerP50), ms(r.BrokerP99), ms(r.BrokerMax),
			ms(r.CreateSpan), ms(r.AllEverywhere), imp[0], imp[1], imp[2], imp[3], imp[4], r.BrokerCPU, float64(r.BrokerPeakRSS)/1e6, r.EtcdCPU, float64(r.EtcdPeakRSS)/1e6,
			r.AgentCPU, r.GatewayCPU, float64(r.WireIn+r.WireOut)/1e6, stall, killed)
	}
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

// usable dials a sample of every gateway's imports, spread over all of
// them, and checks an echo through each: the import is programmed, the
// stream reaches the exporting gateway and its target answers. A failure
// fails the run, naming the import.
func usable(cfg Config, admins []*gateway.AdminClient, res *Result) error {
	n := cfg.Sample
	if n == 0 {
		n = 20
	}
	for i, ad := range admins {
		imps, err := ad.List(string(catalog.KindServiceImport))
		if err != nil {
			return err
		}
		sort.Slice(imps, func(a, b int) bool { return imps[a].Meta().Name < imps[b].Meta().Name })
		for j := 0; j < n && len(imps) > 0; j++ {
			imp := imps[j*len(imps)/n].(*catalog.ServiceImport)
			addr := net.JoinHostPort(imp.Spec.IPs[0], strconv.Itoa(int(imp.Spec.Ports[0].Port)))
			res.Sampled++
			if err := load.EchoOnce(addr, []byte("sync-scale "+addr), 10*time.Second); err != nil {
				return fmt.Errorf("cluster %d's import %s/%s at %s not usable: %w", i+1, imp.Metadata.Namespace, imp.Metadata.Name, addr, err)
			}
			res.Usable++
		}
	}
	return nil
}
