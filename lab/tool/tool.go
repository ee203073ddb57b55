// Package tool defines what the lab compares: a Tool carries a client's
// traffic in one cluster to a service in another. Every tool gets the same
// lab, the same nodes and the same links, so differences in the results are
// the tools' own.
package tool

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/topology"
)

// Service is a workload server listening on the server node.
type Service struct {
	Name string // workload name, e.g. "echo"
	Port int    // TCP port on the server node's address
}

// Env is what a tool is set up in.
type Env struct {
	Lab      *lab.Lab
	Server   *topology.PlanNode // where the services listen
	Client   *topology.PlanNode // where the load generator runs
	Services []Service
	Dir      string // the tool's own scratch directory for configs and logs
	Binary   string // the strait binary, for tools that run strait processes
	Logger   *slog.Logger
}

// A Tool is a thing under test. The runner calls Setup once per lab (a
// fresh lab for every repetition), measures through the returned targets,
// then calls Teardown; a tool must not rely on state from an earlier lab.
//
// Placement contract: a tool runs its data-plane processes only on the
// gateway nodes of the client's and the server's clusters, so every tool's
// traffic crosses the same links with the same hop count as direct routing.
type Tool interface {
	// Name is the tool's name in experiment files and reports.
	Name() string
	// Setup makes every service reachable from the client node and returns,
	// per service name, the host:port the client dials. It returns an error
	// unless the tool is ready to carry traffic.
	Setup(ctx context.Context, env Env) (map[string]string, error)
	// Teardown stops what Setup started. It is safe to call after a failed
	// Setup and more than once.
	Teardown(ctx context.Context) error
	// Version describes the tool's version for the run metadata.
	Version(ctx context.Context) string
	// Carries reports whether the tool carries proto from the client to
	// the server: a routed tunnel carries any IP traffic, a proxy only
	// what it proxies. Reports show "not carried" where it does not,
	// never a zero.
	Carries(proto Protocol) bool
	// Processes lists the tool's running data-plane processes, valid
	// between Setup and Teardown, whose CPU time and memory the runner
	// measures. An empty list means the data plane is the kernel's
	// (routing, VXLAN): no process accounts for its CPU time.
	Processes() []Process
}

// Protocol is a kind of traffic a tool may carry.
type Protocol string

// The protocols the lab measures.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	ICMP Protocol = "icmp"
)

// Protocols lists every Protocol, in report order.
var Protocols = []Protocol{TCP, UDP, ICMP}

// Process is one running process of a tool.
type Process struct {
	Name string // what it is, e.g. "gateway", "envoy", "wireguard-go"
	Node string // the lab node it runs on
	PID  int
}

// Factory makes a fresh Tool.
type Factory func() Tool

var registry = map[string]Factory{}

// Register adds a tool under its name. Tools register from their package's
// init; registering a name twice is a programming error.
func Register(name string, f Factory) {
	if _, dup := registry[name]; dup {
		panic("tool " + name + " registered twice")
	}
	registry[name] = f
}

// New returns a fresh instance of the named tool.
func New(name string) (Tool, error) {
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown tool %q: known tools are %s", name, strings.Join(Names(), ", "))
	}
	return f(), nil
}

// Names lists the registered tools.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
