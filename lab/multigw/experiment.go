// Package multigw runs the lab experiments of clusters with several active
// gateways (seed 003 Sections 6.2–6.3; docs/failover.md):
//
//   - failover: `strait load probe` at a fixed rate through strait while one
//     gateway of the exporting cluster, then one of the importing cluster,
//     is killed with SIGKILL and later restarted (or, with fault:
//     uplink-down, its node's uplink is taken down and later brought back
//     up). It reports the recovery
//     time of new connections (lost probes ÷ rate), the probes lost on
//     long-lived connections — split into connections that broke (they ran
//     through the killed gateway) and connections that did not — and a
//     table of each gateway's new streams per second over time (the shape
//     of seed 003's Fig 13).
//   - aggregate: bulk TCP with many parallel connections through strait when
//     each gateway's WAN uplink is capped at R, for 1, 2, … gateways per
//     cluster, against the goal N × R.
//
// The lab is generated, not read from a file: clusters a (gateways gw1…gwN
// and the server) and b (gw1…gwN and the client), and a one-node cluster
// "wan" standing for the Internet: each gateway's only WAN link is its
// uplink to wan/core, so every gateway of a reaches every gateway of b over
// exactly its own uplink and theirs.
package multigw

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/internal/strictyaml"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
)

// Kinds of experiment.
const (
	KindFailover  = "failover"
	KindAggregate = "aggregate"
)

// Faults a failover experiment inflicts on each victim at kill-at, undone
// at restart-at.
const (
	// FaultKill kills the victim's gateway process with SIGKILL and
	// restarts it (the default).
	FaultKill = "kill"
	// FaultUplinkDown sets the victim node's uplink device down in its
	// namespace and back up: the node and its process live on, cut off
	// from the WAN (docs/failover.md, "Uplink down").
	FaultUplinkDown = "uplink-down"
)

// Experiment is a multi-gateway experiment file.
//
//	kind: failover                  # or aggregate
//	gateways: [3]                   # gateways per cluster; aggregate runs each
//	uplink: {delay: 5ms, rate: 300mbit}   # each gateway's WAN uplink, both directions
//	probe: {rate: 2000, streams: 8, duration: 8s, kill-at: 2s, restart-at: 5s}
//	                                # rejoin-pause: 1500ms: no new connections after restart-at
//	victims: [a/gw2, b/gw2]         # failover: killed one after the other
//	fault: uplink-down              # failover: kill (default) or uplink-down
//	stream: {parallel: 12, duration: 8s}  # aggregate
//	tool: strait-packet             # the gateways' tool (default strait)
type Experiment struct {
	Kind string `yaml:"kind"`
	// Tool is the lab tool whose gateways are measured: one whose gateway
	// processes an experiment can kill (tool.GatewayController), strait
	// (the default) or strait-packet.
	Tool     string          `yaml:"tool,omitempty"`
	Gateways []int           `yaml:"gateways"`
	Uplink   *emulation.Spec `yaml:"uplink,omitempty"`
	Probe    ProbeSettings   `yaml:"probe,omitempty"`
	Victims  []string        `yaml:"victims,omitempty"`
	// Fault is what happens to each victim: FaultKill (default) or
	// FaultUplinkDown.
	Fault  string         `yaml:"fault,omitempty"`
	Stream StreamSettings `yaml:"stream,omitempty"`
	// Emulator as in topology files: auto, netem, tbf or userspace.
	Emulator string `yaml:"emulator,omitempty"`
}

// ProbeSettings drive `strait load probe` in a failover experiment.
type ProbeSettings struct {
	Rate      int           `yaml:"rate"`
	Streams   int           `yaml:"streams"`
	Duration  time.Duration `yaml:"duration"`
	KillAt    time.Duration `yaml:"kill-at"`
	RestartAt time.Duration `yaml:"restart-at"`
	// RejoinPause stops the new-connection probes for this long from
	// restart-at (0: none), and the windows after the restart start at its
	// end. Without it a returning importing gateway gets no new
	// connection while they arrive at 2000/s: the client's resilient
	// nexthop group gives it back only buckets idle for its idle timer
	// (1 s), and every bucket is busy (docs/failover.md, "Uplink down").
	// The long-lived connections go on through the pause.
	RejoinPause time.Duration `yaml:"rejoin-pause,omitempty"`
}

// StreamSettings drive `strait load stream` in an aggregate experiment.
type StreamSettings struct {
	Parallel int           `yaml:"parallel"`
	Duration time.Duration `yaml:"duration"`
}

//go:embed builtin/*.yaml
var builtin embed.FS

// IsBuiltin reports whether name is one of this package's experiments.
func IsBuiltin(name string) bool {
	_, err := readBuiltin(name)
	return err == nil
}

// readBuiltin reads a built-in experiment; a name with a slash or dot is
// a path, never a built-in.
func readBuiltin(name string) ([]byte, error) {
	if strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("%s: not a built-in experiment name", name)
	}
	return builtin.ReadFile("builtin/" + name + ".yaml")
}

// Builtins lists the built-in experiments' names.
func Builtins() []string {
	entries, _ := builtin.ReadDir("builtin")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return out
}

// IsFile reports whether the experiment file at path is a multi-gateway
// one (it has kind: failover or aggregate).
func IsFile(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var k struct {
		Kind string `yaml:"kind"`
	}
	return yaml.Unmarshal(b, &k) == nil && (k.Kind == KindFailover || k.Kind == KindAggregate)
}

// Load reads a built-in experiment by name or a file by path.
func Load(nameOrPath string) (*Experiment, error) {
	b, err := readBuiltin(nameOrPath)
	if err != nil {
		if b, err = os.ReadFile(nameOrPath); err != nil {
			return nil, err
		}
	}
	e, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nameOrPath, err)
	}
	return e, nil
}

// Parse decodes and validates an experiment.
func Parse(b []byte) (*Experiment, error) {
	var e Experiment
	if err := strictyaml.Decode(b, &e); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate names every bad field.
func (e *Experiment) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if e.Kind != KindFailover && e.Kind != KindAggregate {
		bad("kind %q: must be %s or %s", e.Kind, KindFailover, KindAggregate)
	}
	if len(e.Gateways) == 0 {
		bad("gateways: need at least one count, e.g. [1, 2, 3]")
	}
	for i, n := range e.Gateways {
		if n < 1 || n > 8 {
			bad("gateways[%d]: %d, must be 1 to 8", i, n)
		}
	}
	if e.Uplink != nil {
		if _, err := e.Uplink.Params(); err != nil {
			bad("uplink: %v", err)
		}
	}
	if t, err := tool.New(e.tool()); err != nil {
		bad("tool %q: %v", e.Tool, err)
	} else if _, ok := t.(tool.GatewayController); !ok {
		bad("tool %q: its gateways cannot be killed and restarted; use strait or strait-packet", e.Tool)
	}
	if e.Emulator != "" && !slices.Contains(topology.Emulators, e.Emulator) {
		bad("emulator %q: must be one of %s", e.Emulator, strings.Join(topology.Emulators, ", "))
	}
	switch e.Kind {
	case KindFailover:
		p := e.Probe
		if p.Rate < 1 || p.Rate > 100000 {
			bad("probe.rate %d: must be 1 to 100000 per second", p.Rate)
		}
		if p.Streams < 1 || p.Streams > 1024 {
			bad("probe.streams %d: must be 1 to 1024", p.Streams)
		}
		if p.Duration <= 0 || !(0 < p.KillAt && p.KillAt < p.RestartAt && p.RestartAt < p.Duration) {
			bad("probe: need 0 < kill-at (%v) < restart-at (%v) < duration (%v)", p.KillAt, p.RestartAt, p.Duration)
		}
		if p.RejoinPause < 0 || p.RestartAt+p.RejoinPause >= p.Duration {
			bad("probe.rejoin-pause %v: need 0 <= rejoin-pause and restart-at (%v) + rejoin-pause < duration (%v)", p.RejoinPause, p.RestartAt, p.Duration)
		}
		if e.Fault != "" && e.Fault != FaultKill && e.Fault != FaultUplinkDown {
			bad("fault %q: must be %s or %s", e.Fault, FaultKill, FaultUplinkDown)
		}
		if len(e.Victims) == 0 {
			bad("victims: need at least one gateway node, e.g. a/gw2")
		}
		for i, v := range e.Victims {
			c, n, ok := strings.Cut(v, "/")
			if !ok || (c != "a" && c != "b") || !strings.HasPrefix(n, "gw") {
				bad("victims[%d] %q: must be a/gwK (exporting cluster) or b/gwK (importing)", i, v)
				continue
			}
			k := 0
			if _, err := fmt.Sscanf(n, "gw%d", &k); err != nil || k < 1 || slices.ContainsFunc(e.Gateways, func(g int) bool { return k > g }) {
				bad("victims[%d] %q: no such gateway for gateways %v", i, v, e.Gateways)
			}
		}
	case KindAggregate:
		if e.Stream.Parallel < 1 || e.Stream.Parallel > 256 {
			bad("stream.parallel %d: must be 1 to 256", e.Stream.Parallel)
		}
		if e.Stream.Duration <= 0 {
			bad("stream.duration %v: must be positive", e.Stream.Duration)
		}
	}
	return errors.Join(errs...)
}

// fault is what happens to a victim: Fault, or FaultKill.
func (e *Experiment) fault() string {
	if e.Fault == "" {
		return FaultKill
	}
	return e.Fault
}

// tool is the tool to measure: Tool, or strait.
func (e *Experiment) tool() string {
	if e.Tool == "" {
		return "strait"
	}
	return e.Tool
}

// Topology is the generated lab for n gateways per cluster.
func (e *Experiment) Topology(name string, n int) *topology.Topology {
	t := &topology.Topology{Name: name, Emulator: e.Emulator}
	for _, c := range []struct{ name, host string }{{"a", "server"}, {"b", "client"}} {
		cl := topology.Cluster{Name: c.name}
		for k := 1; k <= n; k++ {
			cl.Nodes = append(cl.Nodes, topology.Node{Name: fmt.Sprintf("gw%d", k), Gateway: true})
		}
		cl.Nodes = append(cl.Nodes, topology.Node{Name: c.host})
		t.Clusters = append(t.Clusters, cl)
	}
	t.Clusters = append(t.Clusters, topology.Cluster{Name: "wan", Nodes: []topology.Node{{Name: "core", Gateway: true}}})
	for _, c := range []string{"a", "b"} {
		for k := 1; k <= n; k++ {
			l := topology.WANLink{Between: []string{fmt.Sprintf("%s/gw%d", c, k), "wan/core"}}
			if e.Uplink != nil {
				spec := *e.Uplink
				l.Emulation = &spec
			}
			t.WAN = append(t.WAN, l)
		}
	}
	return t
}
