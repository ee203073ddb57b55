package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/report"
)

// Image is the default image the workloads and the load generator run:
// strait's, whose binary has the lab's apps (`strait app echo`, …) and load
// generators (`strait load seq`), as in the namespace lab; the tag
// scripts/k8s-images.sh gives it on this host's clusters (clusters files
// elsewhere name a tag their clusters can pull).
const Image = "ghcr.io/strait-net/strait:lab"

// Labels every object a run creates carries; Down removes what has them.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "strait-lab"
	UnitLabel      = "strait.dev/lab-unit"
)

// EmuTarget is one cluster's side of an emulated link: the nodes whose
// egress toward Remote is impaired (lab/kube/linkemu's Target).
type EmuTarget struct {
	Cluster string
	Config  *rest.Config
	Nodes   []string       // empty: every Linux node
	Remote  []netip.Prefix // the other clusters' node, pod and service ranges
	// ResetPorts: once the emulation is in place, the nodes' TCP
	// connections toward Remote with a local or peer port among these
	// are ended (the strait gateways' sessions, ClusterMap.Sessions).
	ResetPorts []uint16
}

// Emulator applies a scenario's link emulation between clusters' nodes
// (lab/kube/linkemu, a privileged DaemonSet). Apply returns once every
// node has the emulation in place; Down removes a run's emulation ("" = of
// every run) also after a crash.
type Emulator interface {
	Apply(ctx context.Context, run string, targets []EmuTarget, p emulation.Params) (Applied, error)
	Down(ctx context.Context, cfg *rest.Config, run string) error
	// Needs is what Apply, Remove and Down do in every cluster of an
	// impaired run, which the preflight checks before any unit.
	Needs() EmuNeeds
}

// EmuNeeds is what an Emulator does in each cluster besides listing
// nodes: the preflight checks it when a scenario is impaired, so that a
// missing right fails the run before its first unit, not at the first
// impaired unit after others were measured (docs/lab-clusters.md,
// "Preflight").
type EmuNeeds struct {
	// Namespace holds what the emulator creates; the preflight reads it
	// for its PodSecurity level.
	Namespace string
	// Rights are the verbs on resources in Namespace.
	Rights []EmuRight
	// PodSecurity is the PodSecurity level ("privileged", "baseline",
	// "restricted") Namespace must admit for the emulator's pods; ""
	// checks none.
	PodSecurity string
	// What names the objects in errors, e.g. "the privileged hostNetwork
	// DaemonSet of link emulation".
	What string
}

// EmuRight is one verb on one resource (group "" is the core API; a
// subresource after a slash, as RBAC writes it: pods/log).
type EmuRight struct{ Verb, Group, Resource string }

// Applied is emulation in place; Remove takes it away and, with logs,
// writes there what the emulation's agents logged up to their end (the
// userspace emulator's link counters are its last lines).
type Applied interface {
	Remove(ctx context.Context, logs io.Writer) error
}

// Options configure a Backend.
type Options struct {
	Clusters *ClusterMap
	// Emulator applies emulated scenarios; nil refuses them.
	Emulator Emulator
	// Ready bounds the wait for a unit's pods; zero: 5 minutes (pods start
	// in seconds on an idle host; this only catches a pod that never will).
	Ready  time.Duration
	Logger *slog.Logger
}

// Backend runs lab units on Kubernetes clusters (run.Backend).
type Backend struct {
	opts           Options
	server, client string // cluster names
	conns          map[string]*conn

	mu   sync.Mutex
	meta Metadata
	// sourcesDone: a unit has looked for the clusters' source addresses
	// (detectSources); the run's later units use what it found.
	sourcesDone bool
	// resetPorts are the strait gateways' WAN ports (Check), whose
	// sessions an emulated unit ends once its emulation is in place;
	// empty: none (no strait tool, or sessions: keep).
	resetPorts []uint16
}

// conn is one cluster's client.
type conn struct {
	name string
	cfg  *rest.Config
	cs   kubernetes.Interface
	dyn  dynamic.Interface // ServiceExports and AccessPolicies: CRDs
}

var _ run.Backend = (*Backend)(nil)

// New returns a Backend for the clusters of opts.Clusters. Nothing is
// contacted until Check.
func New(opts Options) (*Backend, error) {
	if opts.Clusters == nil {
		return nil, errors.New("kube: no clusters file")
	}
	if opts.Ready == 0 {
		opts.Ready = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, conns: map[string]*conn{}, meta: Metadata{Clusters: map[string]*ClusterInfo{}, Direct: map[string]string{}, Emulation: map[string]AppliedEmulation{}}}, nil
}

// clusterOf is the cluster of an experiment's cluster/node id.
func clusterOf(id string) string {
	c, _, _ := strings.Cut(id, "/")
	return c
}

// connect reads cluster name's kubeconfig.
func (b *Backend) connect(name string) (*conn, error) {
	if c, ok := b.conns[name]; ok {
		return c, nil
	}
	cfg, err := b.opts.Clusters.Config(name)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// A hung API server must fail a request, not the run's patience.
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c := &conn{name: name, cfg: cfg, cs: cs, dyn: dc}
	b.conns[name] = c
	return c, nil
}

// Check is the preflight (run.Backend): before anything is created, every
// cluster answers, the user may do what a unit does, the nodes can run
// the workloads, and every scenario and tool is one this backend runs.
func (b *Backend) Check(ctx context.Context, p run.BackendPlan) error {
	b.server, b.client = clusterOf(p.Server), clusterOf(p.Client)
	if b.server == b.client {
		return fmt.Errorf("server %s and client %s are in one cluster: runs on clusters measure between two", p.Server, p.Client)
	}
	emulated := false
	for _, sc := range p.Scenarios {
		emulated = emulated || !sc.LAN.IsZero() || !sc.WAN.IsZero()
		if (!sc.LAN.IsZero() || !sc.WAN.IsZero() || sc.MTU != 0 || sc.AsDeclared) && b.opts.Emulator == nil {
			return fmt.Errorf("scenario %s (lan %s, wan %s): link emulation on clusters is not available in this build; run unimpaired scenarios (e.g. --scenarios lcl)", sc.Name, sc.LAN, sc.WAN)
		}
		// The clusters' links are not the lab's: their MTU and a
		// topology's declared links cannot be set.
		if sc.MTU != 0 {
			return fmt.Errorf("scenario %s sets the MTU (%d): runs on clusters keep the clusters' MTU", sc.Name, sc.MTU)
		}
		if sc.AsDeclared {
			return fmt.Errorf("scenario %s: runs on clusters have no topology links to keep as declared; name impaired or unimpaired scenarios", sc.Name)
		}
	}
	for _, t := range p.Tools {
		switch t {
		case "direct", "strait":
		case run.InstalledTool:
			if b.opts.Clusters.Installed == "" {
				return errors.New("tool installed: the clusters file has no installed template (e.g. installed: \"{service}.{namespace}.svc.clusterset.local\")")
			}
		default:
			return fmt.Errorf("tool %s: runs on clusters measure direct, strait and installed only", t)
		}
	}
	// Every cluster answers before any is examined: an unreachable one is
	// the first thing to fix.
	versions := map[string]string{}
	for _, name := range []string{b.server, b.client} {
		c, err := b.connect(name)
		if err != nil {
			return err
		}
		v, err := c.cs.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("cluster %s: API server %s unreachable: %w", name, c.cfg.Host, err)
		}
		versions[name] = v.GitVersion
	}
	for _, name := range []string{b.server, b.client} {
		export := hasTool(p.Tools, "strait") || (hasTool(p.Tools, run.InstalledTool) && b.opts.Clusters.Export)
		var emu *EmuNeeds
		if emulated {
			n := b.opts.Emulator.Needs()
			emu = &n
		}
		info, err := preflight(ctx, b.conns[name], name == b.server, name == b.client, p.Tools, export, emu)
		if err != nil {
			return err
		}
		info.Version = versions[name]
		b.mu.Lock()
		b.meta.Clusters[name] = info
		b.mu.Unlock()
		if emulated && hasTool(p.Tools, "strait") && b.opts.Clusters.Sessions == SessionsReset {
			port, err := gatewayPort(ctx, b.conns[name])
			if err != nil {
				return err
			}
			if !slices.Contains(b.resetPorts, port) {
				b.resetPorts = append(b.resetPorts, port)
			}
		}
	}
	return nil
}

// Metadata is what the run records about the clusters (run.Backend).
func (b *Backend) Metadata() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.meta
	m.Server, m.Client = b.server, b.client
	return m
}

// The run's record of the clusters is the report's (report.ClusterRun),
// so the report page reads what the run wrote.
type (
	Metadata         = report.ClusterRun
	AppliedEmulation = report.ClusterEmulation
	ClusterInfo      = report.ClusterInfo
	NodeInfo         = report.ClusterNode
	Source           = report.ClusterSource
)

func (b *Backend) setDirect(unit, how string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.meta.Direct[unit] = how
}

// hasTool is whether tools names t.
func hasTool(tools []string, t string) bool { return slices.Contains(tools, t) }
