// Package run executes experiments: for every scenario and repetition it
// builds a fresh lab, starts the workloads, sets up each tool, drives the
// load generator through it, and records every request.
package run

import (
	"embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/internal/strictyaml"
	"github.com/strait-net/strait/lab/cpulatency"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
)

// Experiment is an experiment file: one topology, the scenarios to impair it
// with, the tools to compare and the workloads to drive through them.
//
//	name: quickstart
//	topology: quickstart.yaml        # a path relative to this file, or an inline topology
//	scenarios: [lcl, edg10]
//	tools: [direct]
//	server: a/server                 # node running the workloads
//	client: b/client                 # node running the load generator
//	repetitions: 1
//	workloads:
//	  - name: echo
//	    payloads: [1KB, 100KB]
//	load: {requests: 40, threads: 1, keepalive: true}
type Experiment struct {
	Name     string    `yaml:"name"`
	Topology yaml.Node `yaml:"topology"`
	// DefineScenarios are the experiment's own scenarios, which Scenarios
	// may name beside the catalogs' (scenario.Spec: lan, wan, mtu).
	DefineScenarios []scenario.Spec `yaml:"define-scenarios"`
	Scenarios       []string        `yaml:"scenarios"`
	Tools           []string        `yaml:"tools"`
	Server          string          `yaml:"server"`
	Client          string          `yaml:"client"`
	Repetitions     int             `yaml:"repetitions"`
	Workloads       []Workload      `yaml:"workloads"`
	Load            Load            `yaml:"load"`
	// ComposePath impairs each scenario's client–server path as runs on
	// clusters do: LAN, WAN and LAN composed into one impairment per
	// direction on the WAN link, clean LAN links (scenario.ComposePath;
	// docs/lab-clusters.md, "Measured"), so the two labs' cells compare.
	ComposePath bool `yaml:"compose-path"`
	// Parallel is how many units (scenario × repetition, each in a lab of
	// its own) run at once. Latency-bound runs gain almost linearly; keep 1
	// where CPU time is what is measured.
	Parallel int `yaml:"parallel"`
	// CPULatency, when set (e.g. "0"), holds the host's CPU latency QoS
	// at that wake-up latency while the units run (lab/cpulatency): 0
	// keeps idle CPUs polling instead of halting, so that the tools with
	// more process hops do not pay the host's idle exits at each
	// (README, "CPU idle states"). Unset: the host as it is.
	CPULatency string `yaml:"cpu-latency"`
	// JTL also writes requests.jtl in JMeter's CSV result format.
	JTL bool `yaml:"jtl"`
	// Throughput, when set, also measures bulk TCP throughput through every
	// tool with `strait load stream` (iperf-like, no HTTP).
	Throughput *Throughput `yaml:"throughput"`
	// Rate, when set, also measures open-loop latency at fixed request
	// rates through every tool with `strait load rate` (wrk2-like).
	Rate *Rate `yaml:"rate"`
	// Iperf3, when set, also measures TCP and UDP throughput with iperf3
	// and round trips with ping through every tool (seed 004's method).
	Iperf3 *Iperf3 `yaml:"iperf3"`
	// Reference holds another testbed's published figures (a seed's),
	// shown in the report beside this run's and labelled as theirs.
	Reference *Reference `yaml:"reference"`
	// Soak, when set, runs a long mixed load through every tool and
	// samples the tool's processes over time (soak.go, README "Soak").
	Soak *Soak `yaml:"soak"`

	// Resolved by Parse.
	dir        string // where a relative topology path is resolved
	source     []byte
	topo       *topology.Topology
	scenarios  []scenario.Scenario
	cpuLatency *time.Duration // CPULatency parsed
	// roundTrips is each scenario's round trip between client and server
	// before jitter, loss or tools (pathRoundTrip).
	roundTrips map[string]time.Duration
}

// Workload is one workload and the request payload sizes to drive it with.
type Workload struct {
	Name     string   `yaml:"name" json:"name"`
	Payloads []string `yaml:"payloads" json:"payloads"`
	// KPI is the response time the use case tolerates (seed 000: 1000 ms
	// for remote maintenance, 100 ms for vehicle decision assist); reports
	// flag cells above it.
	KPI string `yaml:"kpi" json:"kpi,omitempty"`
	// KeepAlive, when set, overrides load.keepalive for this workload, so
	// one experiment can measure a workload on kept connections and on a
	// new connection per request; the second is reported as
	// "<name>-newconn".
	KeepAlive *bool `yaml:"keepalive" json:"keepalive,omitempty"`
	// Requests sets the request count of some payloads (e.g. {1MB: 30}),
	// which otherwise take load.requests: large payloads over a lossy
	// path take seconds each, small ones need many for a tight interval.
	Requests map[string]int `yaml:"requests" json:"requests,omitempty"`

	sizes    []int
	requests map[int]int // Requests by payload size
}

// label is the workload's name in cells, tables and file names.
func (w Workload) label() string {
	if w.KeepAlive != nil && !*w.KeepAlive {
		return w.Name + "-newconn"
	}
	return w.Name
}

// requestsFor is how many requests each cell of payload size sends.
func (w Workload) requestsFor(size int, l Load) int {
	if n, ok := w.requests[size]; ok {
		return n
	}
	return l.Requests
}

// keepAlive is whether the workload's requests reuse their connection.
func (w Workload) keepAlive(l Load) bool {
	if w.KeepAlive != nil {
		return *w.KeepAlive
	}
	return l.keepAlive()
}

// Workload kinds and the port each listens on, on the server node.
var workloadPorts = map[string]int{"echo": 8080, "recv": 8081, "static": 8082, "hello": 8083}

// streamService is the name and port of the stream server the throughput
// measurement runs on the server node.
const (
	streamService = "stream"
	streamPort    = 5201
)

// Throughput configures bulk TCP measurements: for every count of parallel
// streams, one transfer of Duration from client to server (or the
// reverse); and for every RR message size, request/response ping-pong of
// Duration on each of the same counts of connections (seed 002's uperf
// profiles use 64, 1024 and 8192 bytes).
type Throughput struct {
	Streams  []int  `yaml:"streams" json:"streams"`
	Duration string `yaml:"duration" json:"duration"`
	Reverse  bool   `yaml:"reverse" json:"reverse"`
	RR       []int  `yaml:"rr" json:"rr,omitempty"`
	// Scenarios, when set, limits the measurement to these of the
	// experiment's scenarios (e.g. only where a lossy link makes it say
	// something); by default it runs in every scenario.
	Scenarios []string `yaml:"scenarios" json:"scenarios,omitempty"`
	// Runs is how many transfers of Duration each cell makes one after
	// the other in every repetition (default 1). Each run is one sample
	// of the cell's mean and of its ratio to direct's, so a cell gets a
	// 95 % interval without repeating the whole unit (README, "Quickstart").
	Runs int `yaml:"runs" json:"runs,omitempty"`

	duration time.Duration
}

// Load are the load generator's settings, as `strait load seq` takes them.
type Load struct {
	Requests int `yaml:"requests" json:"requests"`
	// Duration, when set, makes each cell send requests for this long,
	// Requests being the least it sends (see load.SeqConfig.Duration).
	Duration        string `yaml:"duration" json:"duration,omitempty"`
	Threads         int    `yaml:"threads" json:"threads"`
	KeepAlive       *bool  `yaml:"keepalive" json:"keepalive"`
	Think           string `yaml:"think" json:"think,omitempty"`
	ConnectTimeout  string `yaml:"connect-timeout" json:"connect-timeout,omitempty"`
	ResponseTimeout string `yaml:"response-timeout" json:"response-timeout,omitempty"`
	Warmup          int    `yaml:"warmup" json:"warmup"`
}

//go:embed builtin/*.yaml
var builtin embed.FS

// Builtins lists the experiments that can be run by name.
func Builtins() []string {
	entries, _ := builtin.ReadDir("builtin")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !strings.HasSuffix(n, "-topology") {
			names = append(names, n)
		}
	}
	return names
}

// Load reads an experiment from a file, or a built-in one by name.
func LoadExperiment(nameOrPath string) (*Experiment, error) {
	if b, err := builtin.ReadFile("builtin/" + nameOrPath + ".yaml"); err == nil && !strings.ContainsAny(nameOrPath, "/.") {
		return Parse(b, "builtin")
	}
	b, err := os.ReadFile(nameOrPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(nameOrPath, "/.") {
			return nil, fmt.Errorf("no experiment file %q and no built-in experiment of that name (built-in: %s)", nameOrPath, strings.Join(Builtins(), ", "))
		}
		return nil, err
	}
	e, err := Parse(b, filepath.Dir(nameOrPath))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nameOrPath, err)
	}
	return e, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Parse decodes and validates an experiment. dir resolves a topology given
// as a relative path ("builtin" means the embedded files).
func Parse(b []byte, dir string) (*Experiment, error) {
	var e Experiment
	if err := strictyaml.Decode(b, &e); err != nil {
		return nil, fmt.Errorf("parse experiment: %w", err)
	}
	if err := e.resolve(dir); err != nil {
		return nil, err
	}
	e.source = b
	return &e, nil
}

func (e *Experiment) resolve(dir string) error {
	e.dir = dir
	if !nameRE.MatchString(e.Name) {
		return fmt.Errorf("name %q: must be lowercase letters, digits and '-', starting with a letter or digit", e.Name)
	}
	var err error
	switch e.Topology.Kind {
	case 0:
		return errors.New("topology: missing (a file path or an inline topology)")
	case yaml.ScalarNode:
		var b []byte
		if dir == "builtin" {
			b, err = builtin.ReadFile("builtin/" + e.Topology.Value)
		} else {
			path := e.Topology.Value
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			b, err = os.ReadFile(path)
		}
		if err != nil {
			return fmt.Errorf("topology: %w", err)
		}
		if e.topo, err = topology.Parse(b); err != nil {
			return fmt.Errorf("topology %s: %w", e.Topology.Value, err)
		}
	case yaml.MappingNode:
		b, err := yaml.Marshal(&e.Topology)
		if err != nil {
			return fmt.Errorf("topology: %w", err)
		}
		if e.topo, err = topology.Parse(b); err != nil {
			return fmt.Errorf("topology: %w", err)
		}
	default:
		return fmt.Errorf("topology: line %d: want a file path or a mapping", e.Topology.Line)
	}
	plan, err := e.topo.Plan()
	if err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	if len(e.Scenarios) == 0 {
		return errors.New("scenarios: name at least one (e.g. lcl, edg10)")
	}
	defined := map[string]scenario.Scenario{}
	for i, spec := range e.DefineScenarios {
		sc, err := spec.Resolve()
		if err != nil {
			return fmt.Errorf("define-scenarios[%d]: %w", i, err)
		}
		if _, dup := defined[sc.Name]; dup {
			return fmt.Errorf("define-scenarios[%d]: %q is defined twice", i, sc.Name)
		}
		defined[sc.Name] = sc
	}
	for i, name := range e.Scenarios {
		sc, ok := defined[name]
		if !ok {
			var err error
			if sc, err = scenario.Lookup(name); err != nil {
				return fmt.Errorf("scenarios[%d]: %w (or one of define-scenarios)", i, err)
			}
		}
		e.scenarios = append(e.scenarios, sc)
	}
	if len(e.Tools) == 0 {
		e.Tools = []string{"direct"}
	}
	for i, name := range e.Tools {
		if name == InstalledTool {
			continue // checked against the backend by Run
		}
		if _, err := tool.New(name); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
	}
	for field, id := range map[string]string{"server": e.Server, "client": e.Client} {
		if _, ok := plan.Node(id); !ok {
			return fmt.Errorf("%s: %q is not a node of the topology (use cluster/node)", field, id)
		}
	}
	if e.Server == e.Client {
		return fmt.Errorf("client: %q is also the server", e.Client)
	}
	if e.ComposePath {
		if err := composable(plan, e.Server, e.Client); err != nil {
			return fmt.Errorf("compose-path: %w", err)
		}
		for i, sc := range e.scenarios {
			if e.scenarios[i], err = sc.ComposePath(); err != nil {
				return fmt.Errorf("compose-path: %w", err)
			}
		}
	}
	e.roundTrips = map[string]time.Duration{}
	for _, sc := range e.scenarios {
		p, err := e.topo.Plan()
		if err != nil {
			return fmt.Errorf("topology: %w", err)
		}
		sc.Apply(p)
		if e.roundTrips[sc.Name], err = pathRoundTrip(p, e.Client, e.Server); err != nil {
			return fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
	}
	if e.Repetitions == 0 {
		e.Repetitions = 1
	}
	if e.Parallel < 0 || e.Parallel > 64 {
		return fmt.Errorf("parallel %d: must be between 0 (one at a time) and 64", e.Parallel)
	}
	e.cpuLatency = nil
	if e.CPULatency != "" {
		d, err := emulation.ParseDuration(e.CPULatency)
		if err == nil {
			err = cpulatency.Check(d)
		}
		if err != nil {
			return fmt.Errorf("cpu-latency: %w", err)
		}
		e.cpuLatency = &d
	}
	if e.Repetitions < 0 || e.Repetitions > 1000 {
		return fmt.Errorf("repetitions %d: must be between 1 and 1000", e.Repetitions)
	}
	if len(e.Workloads) == 0 && e.Throughput == nil && e.Rate == nil && e.Iperf3 == nil && e.Soak == nil {
		return errors.New("workloads: name at least one (echo, recv, static, hello), or set throughput, rate, iperf3 or soak")
	}
	if e.Soak != nil {
		if err := e.Soak.validate(); err != nil {
			return err
		}
	}
	if e.Iperf3 != nil {
		if err := e.Iperf3.validate(); err != nil {
			return err
		}
	}
	if e.Reference != nil {
		if err := e.Reference.validate(); err != nil {
			return err
		}
	}
	if tp := e.Throughput; tp != nil {
		if len(tp.Streams) == 0 {
			tp.Streams = []int{1}
		}
		for i, n := range tp.Streams {
			if n < 1 || n > 128 {
				return fmt.Errorf("throughput.streams[%d] %d: must be between 1 and 128", i, n)
			}
		}
		tp.duration = 5 * time.Second
		if tp.Duration != "" {
			d, err := emulation.ParseDuration(tp.Duration)
			if err != nil || d < 100*time.Millisecond || d > time.Hour {
				return fmt.Errorf("throughput.duration %q: want a duration between 100ms and 1h", tp.Duration)
			}
			tp.duration = d
		}
		if tp.Runs == 0 {
			tp.Runs = 1
		}
		if tp.Runs < 1 || tp.Runs > 100 {
			return fmt.Errorf("throughput.runs %d: must be between 1 and 100", tp.Runs)
		}
		for i, name := range tp.Scenarios {
			if !slices.Contains(e.Scenarios, name) {
				return fmt.Errorf("throughput.scenarios[%d] %q: not one of the experiment's scenarios (%s)", i, name, strings.Join(e.Scenarios, ", "))
			}
		}
		for i, n := range tp.RR {
			if n < 1 || n > 1<<20 {
				return fmt.Errorf("throughput.rr[%d] %d: message size must be between 1 and 1048576 bytes", i, n)
			}
		}
	}
	if e.Rate != nil {
		if err := e.Rate.validate(); err != nil {
			return err
		}
		// Each scenario's round trip sets its cells' connections
		// (rateConnections), so they are known before anything runs.
		e.Rate.roundTrips = e.roundTrips
	}
	labels := map[string]int{}
	for i := range e.Workloads {
		if err := e.Workloads[i].resolve(fmt.Sprintf("workloads[%d]", i)); err != nil {
			return err
		}
		l := e.Workloads[i].label()
		if j, dup := labels[l]; dup {
			return fmt.Errorf("workloads[%d]: %s is also workloads[%d]; list its payloads once, or set keepalive: false on one of them to measure new connections", i, l, j)
		}
		labels[l] = i
	}
	return e.Load.validate()
}

// composable checks that the path from client to server is the one
// scenario.Path composes: the client's LAN link, one WAN link, the
// server's LAN link. A gateway node has no LAN link on the path, and
// clusters without a WAN link between them would be reached over more than
// one, so the composed impairment would be applied too rarely or too often.
func composable(plan *topology.Plan, server, client string) error {
	s, _ := plan.Node(server)
	c, _ := plan.Node(client)
	for _, n := range []*topology.PlanNode{s, c} {
		if n.Gateway {
			return fmt.Errorf("%s is a gateway node: the path is composed as LAN, WAN, LAN (client and server on non-gateway nodes of two clusters joined by a WAN link)", n.ID)
		}
	}
	if s.Cluster == c.Cluster {
		return fmt.Errorf("server %s and client %s are in one cluster: the path is composed as LAN, WAN, LAN (client and server in two clusters joined by a WAN link)", server, client)
	}
	for _, l := range plan.Links {
		a, _ := plan.Node(l.A.Node)
		b, _ := plan.Node(l.B.Node)
		if l.Class == topology.WAN && a != nil && b != nil && (a.Cluster == s.Cluster && b.Cluster == c.Cluster || a.Cluster == c.Cluster && b.Cluster == s.Cluster) {
			return nil
		}
	}
	return fmt.Errorf("no WAN link joins clusters %s and %s: the path is composed as LAN, WAN, LAN (client and server in two clusters joined by a WAN link)", c.Cluster, s.Cluster)
}

// resolve checks a workload and parses its payload sizes; field names it
// in errors.
func (w *Workload) resolve(field string) error {
	if _, ok := workloadPorts[w.Name]; !ok {
		return fmt.Errorf("%s.name %q: must be one of echo, recv, static, hello", field, w.Name)
	}
	if w.KPI != "" {
		if _, err := emulation.ParseDuration(w.KPI); err != nil {
			return fmt.Errorf("%s.kpi: %w", field, err)
		}
	}
	if len(w.Payloads) == 0 {
		w.Payloads = []string{"0"}
	}
	w.sizes = w.sizes[:0]
	for j, p := range w.Payloads {
		n, err := ParseSize(p)
		if err != nil {
			return fmt.Errorf("%s.payloads[%d]: %w", field, j, err)
		}
		if n > 0 && (w.Name == "static" || w.Name == "hello") {
			return fmt.Errorf("%s.payloads[%d]: %s takes no request body (payload 0)", field, j, w.Name)
		}
		w.sizes = append(w.sizes, n)
	}
	w.requests = map[int]int{}
	for _, p := range slices.Sorted(maps.Keys(w.Requests)) {
		n, err := ParseSize(p)
		if err != nil {
			return fmt.Errorf("%s.requests: %w", field, err)
		}
		if !slices.Contains(w.sizes, n) {
			return fmt.Errorf("%s.requests: %s is not one of the payloads %v", field, p, w.Payloads)
		}
		if w.Requests[p] <= 0 {
			return fmt.Errorf("%s.requests: %s: %d requests, want at least 1", field, p, w.Requests[p])
		}
		w.requests[n] = w.Requests[p]
	}
	return nil
}

// kpiMS is the workload's KPI in milliseconds, 0 without one.
func (w Workload) kpiMS() float64 {
	d, err := emulation.ParseDuration(w.KPI)
	if w.KPI == "" || err != nil {
		return 0
	}
	return float64(d) / float64(time.Millisecond)
}

// servedWorkloads lists every workload the server node must run: the
// closed-loop ones and the open-loop (rate) ones, each once.
func (e *Experiment) servedWorkloads() []string {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, w := range e.Workloads {
		add(w.Name)
	}
	if e.Rate != nil {
		for _, w := range e.Rate.Workloads {
			add(w.Name)
		}
	}
	if e.Soak != nil {
		add(soakWorkload)
	}
	return names
}

func (l *Load) validate() error {
	if l.Requests == 0 {
		l.Requests = 40
	}
	if l.Threads == 0 {
		l.Threads = 1
	}
	if l.Requests < 0 || l.Threads < 0 || l.Warmup < 0 {
		return errors.New("load: requests, threads and warmup must not be negative")
	}
	for field, v := range map[string]string{"think": l.Think, "connect-timeout": l.ConnectTimeout, "response-timeout": l.ResponseTimeout, "duration": l.Duration} {
		if v == "" {
			continue
		}
		if _, err := emulation.ParseDuration(v); err != nil {
			return fmt.Errorf("load.%s: %w", field, err)
		}
	}
	return nil
}

func (l Load) keepAlive() bool { return l.KeepAlive == nil || *l.KeepAlive }

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$`)

var sizeUnits = map[string]float64{
	"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// ParseSize reads a payload size: bytes, or with a unit — KB and MB are
// decimal (1KB = 1000 B, as seed 000's sizes are), KiB and MiB binary.
func ParseSize(s string) (int, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size (use e.g. 60, 1KB, 100KB, 1MB, 1KiB)", s)
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use B, KB, MB, GB, KiB, MiB, GiB)", s, m[2])
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	n := v * unit
	if n > 1<<30 || n != math.Trunc(n) {
		return 0, fmt.Errorf("%q: must be a whole number of bytes up to 1GiB", s)
	}
	return int(n), nil
}

// kpis maps each workload with a KPI, closed or open loop, to it in ms.
func (e *Experiment) kpis() map[string]float64 {
	m := map[string]float64{}
	ws := e.Workloads
	if e.Rate != nil {
		ws = append(slices.Clip(ws), e.Rate.Workloads...)
	}
	for _, w := range ws {
		if v := w.kpiMS(); v > 0 {
			m[w.label()] = v
		}
	}
	return m
}
