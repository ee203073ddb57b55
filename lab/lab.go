// Package lab builds a topology plan into network namespaces on this host —
// nodes, point-to-point links (plain veth, kernel netem, or strait's
// userspace emulator), addresses and routes — and takes it down again, also
// after a crash: everything it creates carries the lab's name, so leftovers
// are found by name.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

// NetnsPrefix starts the name of every namespace strait creates:
// st-<lab>-<cluster>-<node>. Lab names hold no '-', so the lab a namespace
// belongs to is the part between the first two dashes.
const NetnsPrefix = "st-"

// DefaultStateDir holds one directory per lab that is up. It lives on /run
// because namespaces do not survive a reboot either.
const DefaultStateDir = "/run/strait/labs"

// Emulation backends.
const (
	BackendNone      = "none"      // nothing in the lab is impaired
	BackendNetem     = "netem"     // kernel netem qdiscs on veth pairs
	BackendUserspace = "userspace" // TUN pairs driven by `strait lab emulate`
	BackendTBF       = "tbf"       // kernel token bucket qdiscs on veth pairs, for rate-only links
	// BackendAuto shapes rate-only links with tbf, carries links without
	// delay or jitter either way with BackendKernel, and the others with
	// netem where the kernel has it, else links delayed one way only with
	// BackendSplit and the others with the userspace emulator. A lab that
	// mixes two backends records both, e.g. "kernel+userspace".
	BackendAuto = "auto"
)

// Options are the knobs of Up and Down. The zero value works when the
// caller is the strait binary itself.
type Options struct {
	// Binary is the strait executable that runs the userspace emulator;
	// empty means this process's own executable.
	Binary string
	// StateDir is where labs record what they created; empty means
	// DefaultStateDir.
	StateDir string
	// Emulator overrides the plan's backend choice: auto, netem, userspace
	// or tbf.
	Emulator string
	Logger   *slog.Logger
	// KeepEmulatorLog, when set, is where Down leaves the userspace
	// emulator's log before it removes the state directory: the counters
	// per link and direction it writes as it stops (packets, drops for
	// loss and for the queue limit, late writes) say what the emulation
	// itself did to a run's traffic.
	KeepEmulatorLog string
}

// StateDirEnv overrides DefaultStateDir, so that tests can keep their labs'
// state apart from a user's.
const StateDirEnv = "STRAIT_STATE_DIR"

func (o Options) stateDir() string {
	if o.StateDir != "" {
		return o.StateDir
	}
	if d := os.Getenv(StateDirEnv); d != "" {
		return d
	}
	return DefaultStateDir
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// Validate checks the fields that can be checked without a plan.
func (o Options) Validate() error {
	switch o.Emulator {
	case "", BackendAuto, BackendNetem, BackendUserspace, BackendTBF:
		return nil
	}
	return fmt.Errorf("emulator %q: must be one of auto, netem, userspace, tbf", o.Emulator)
}

// Lab is a lab that is up, as recorded in its state directory.
type Lab struct {
	Plan *topology.Plan `json:"plan"`
	Dir  string         `json:"dir"`
	// Backend is the emulation backend the lab's emulated links use.
	Backend string `json:"backend"`
	// EmulatorPID is the userspace emulator daemon, 0 if none runs.
	EmulatorPID int `json:"emulatorPid,omitempty"`
	// EmulatorSeed seeds the emulator's random loss and jitter.
	EmulatorSeed uint64    `json:"emulatorSeed,omitempty"`
	Created      time.Time `json:"created"`
}

// CheckEmulator fails when the lab has an emulator daemon and it is no
// longer running. A TUN link dies with its emulator, but a split link's
// delayed direction falls back to the plain veth (docs/topology.md), so
// without this check cells measured after a crash would look valid.
func (l *Lab) CheckEmulator() error {
	if l.EmulatorPID == 0 || processAlive(l.EmulatorPID) {
		return nil
	}
	return fmt.Errorf("the link emulator (pid %d) of lab %s has exited, so its links are no longer emulated; see %s", l.EmulatorPID, l.Plan.Name, filepath.Join(l.Dir, emulatorLog))
}

// Node returns the plan node with the given ID ("cluster/node") or namespace.
func (l *Lab) Node(id string) (*topology.PlanNode, error) {
	for i := range l.Plan.Nodes {
		n := &l.Plan.Nodes[i]
		if n.ID == id || n.Netns == id {
			return n, nil
		}
	}
	ids := make([]string, len(l.Plan.Nodes))
	for i, n := range l.Plan.Nodes {
		ids[i] = n.ID
	}
	return nil, fmt.Errorf("lab %s has no node %q (nodes: %s)", l.Plan.Name, id, strings.Join(ids, ", "))
}

var labName = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// ValidName reports whether name can name a lab: 1–8 lowercase letters or
// digits, so that namespace names stay short and unambiguous.
func ValidName(name string) error {
	if !labName.MatchString(name) {
		return fmt.Errorf("lab name %q: must be 1–8 lowercase letters or digits", name)
	}
	return nil
}

const stateFile = "lab.json"

// Load reads the state of the lab called name.
func Load(name string, opts Options) (*Lab, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(opts.stateDir(), name, stateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lab %s is not up (no %s)", name, path)
	}
	if err != nil {
		return nil, err
	}
	var l Lab
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if l.Plan == nil {
		return nil, fmt.Errorf("read %s: no plan", path)
	}
	return &l, nil
}

func (l *Lab) save() error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.Dir, stateFile))
}

// List returns the names of the labs that are up or have left something
// behind (a state directory or a namespace).
func List(ctx context.Context, opts Options) ([]string, error) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(opts.stateDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && ValidName(e.Name()) == nil {
			seen[e.Name()] = true
		}
	}
	nss, err := namespaces(ctx)
	if err != nil {
		return nil, err
	}
	for _, ns := range nss {
		if name, ok := labOfNetns(ns); ok {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func labOfNetns(ns string) (string, bool) {
	rest, ok := strings.CutPrefix(ns, NetnsPrefix)
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "-")
	return name, ok && ValidName(name) == nil
}
