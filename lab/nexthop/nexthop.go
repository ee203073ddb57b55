// Package nexthop spreads a client node's connections to a service address
// over its cluster's gateways with a Linux resilient nexthop group, and keeps
// the group in step with the gateways' health.
//
// A resilient group (ip nexthop ... type resilient, Linux 5.13+) hashes
// flows onto a fixed number of buckets, each owned by one gateway. When a
// gateway leaves the group only its buckets move; the others keep theirs,
// so established connections through live gateways are never rerouted (a
// plain ECMP route rehashes every flow when a nexthop goes). When a gateway
// returns, it gets back only buckets that were idle for IdleTimer, so
// connections that are still sending stay where they are.
//
// A dead gateway cannot remove itself, so a Watcher on the client node
// probes every gateway's health responder (package health) and rewrites the
// group. It only edits routes: it carries no traffic. A member's health
// target is whatever forwards its clients' flows: the gateway process's
// responder in the stream mode, the node's programs in the packet mode,
// which answer the same probes on their probe port and outlive a killed
// process (docs/packet.md, "Health").
package nexthop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strait-net/strait/health"
	"github.com/strait-net/strait/lab/topology"
)

// Member is one gateway of the group.
type Member struct {
	Via    netip.Addr // the gateway's address on the client's link to it
	Dev    string     // the client's device of that link
	Health string     // UDP host:port that answers the gateway's health probes
}

// Config configures a Watcher.
type Config struct {
	// Route is the destination the group serves, e.g. a service VIP /32.
	Route netip.Prefix
	// Src is the client's source address for the route (in the lab, the
	// node's own address). Without it the kernel picks the address of the
	// first member's link, which the other gateways have no route back to.
	Src netip.Addr
	// ID is the group's nexthop ID; members get ID+1, ID+2, …. Default 100.
	ID int
	// Members are the gateways, at least one.
	Members []Member
	// Buckets is the group's size. Default 128.
	Buckets int
	// IdleTimer is how long a bucket must be idle before it may move to a
	// returning gateway. Default 1s.
	IdleTimer time.Duration
	// Interval and Misses tune the health probes (defaults 5ms and 200, i.e. 1s of silence). A
	// killed gateway is seen at the next probe, whose ICMP port unreachable
	// needs no misses; silence is for a frozen or vanished node, and a
	// wrong verdict reroutes the gateway's established connections, so it
	// must survive a busy host's scheduling delays.
	Interval time.Duration
	Misses   int
	Logger   *slog.Logger
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case !c.Route.IsValid():
		return errors.New("nexthop: route: need a prefix, e.g. 10.96.0.50/32")
	case len(c.Members) == 0:
		return errors.New("nexthop: members: need at least one gateway")
	case c.ID < 0 || c.ID+len(c.Members) > 1<<31-1:
		return fmt.Errorf("nexthop: id %d: out of range", c.ID)
	case c.Buckets < 0 || c.Buckets > 1<<16:
		return fmt.Errorf("nexthop: buckets %d: must be 0 (default 128) to 65536", c.Buckets)
	case c.IdleTimer < 0:
		return fmt.Errorf("nexthop: idle timer %v: must be >= 0", c.IdleTimer)
	}
	for i, m := range c.Members {
		if !m.Via.IsValid() || m.Dev == "" || m.Health == "" {
			return fmt.Errorf("nexthop: members[%d]: need via, dev and health", i)
		}
	}
	return nil
}

// Watcher installs the group and route and keeps the group's membership
// equal to the live gateways.
type Watcher struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	live  []bool
	dirty bool // the group in the kernel may differ from live: rewrite it
}

// New checks cfg and applies defaults.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == 0 {
		cfg.ID = 100
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = 128
	}
	if cfg.IdleTimer == 0 {
		cfg.IdleTimer = time.Second
	}
	if cfg.Misses == 0 {
		cfg.Misses = 200
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, live: make([]bool, len(cfg.Members))}
	if w.log == nil {
		w.log = slog.Default()
	}
	for i := range w.live {
		w.live[i] = true
	}
	return w, nil
}

// Setup hashes multipath routes on ports too, then creates the members,
// the group with all of them, and the route. Without the L4 hash policy the
// kernel hashes only the addresses, and every connection from a client to
// the VIP lands in the same bucket, on one gateway.
func (w *Watcher) Setup(ctx context.Context) error {
	if err := os.WriteFile("/proc/sys/net/ipv4/fib_multipath_hash_policy", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("nexthop: hash flows on ports: %w", err)
	}
	for i, m := range w.cfg.Members {
		if err := ip(ctx, "nexthop", "replace", "id", strconv.Itoa(w.cfg.ID+1+i), "via", m.Via.String(), "dev", m.Dev); err != nil {
			return err
		}
	}
	if err := w.install(ctx); err != nil {
		return err
	}
	args := []string{"route", "replace", w.cfg.Route.String(), "nhid", strconv.Itoa(w.cfg.ID)}
	if w.cfg.Src.IsValid() {
		args = append(args, "src", w.cfg.Src.String())
	}
	return ip(ctx, args...)
}

// install writes the group with the live members; with none live it keeps
// them all, since there is nowhere better to send the flows.
func (w *Watcher) install(ctx context.Context) error {
	var ids []string
	for i, up := range w.live {
		if up {
			ids = append(ids, strconv.Itoa(w.cfg.ID+1+i))
		}
	}
	if len(ids) == 0 {
		for i := range w.live {
			ids = append(ids, strconv.Itoa(w.cfg.ID+1+i))
		}
	}
	return ip(ctx, "nexthop", "replace", "id", strconv.Itoa(w.cfg.ID), "group", strings.Join(ids, "/"),
		"type", "resilient", "buckets", strconv.Itoa(w.cfg.Buckets),
		"idle_timer", strconv.Itoa(int(max(1, w.cfg.IdleTimer.Round(time.Second)/time.Second))))
}

// Run sets up the group and probes until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.Setup(ctx); err != nil {
		return err
	}
	var targets []string
	for _, m := range w.cfg.Members {
		targets = append(targets, m.Health)
	}
	p, err := health.NewProber(health.ProberConfig{Targets: targets, Interval: w.cfg.Interval, Misses: w.cfg.Misses,
		OnChange: func(target string, up bool) {
			w.mu.Lock()
			defer w.mu.Unlock()
			changed := false
			for i, m := range w.cfg.Members {
				if m.Health == target && w.live[i] != up {
					w.live[i], changed = up, true
				}
			}
			if !changed {
				return
			}
			w.log.Info("gateway health", "health", target, "live", up)
			w.dirty = true
			w.sync(ctx)
		}})
	if err != nil {
		return err
	}
	// A failed rewrite (ip could not run on a busy machine) is retried
	// until it succeeds; the prober reports each change only once. The
	// retry loop ends with Run, also when the prober fails before ctx is
	// done.
	ctx, cancel := context.WithCancel(ctx)
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	done := make(chan struct{})
	defer func() {
		cancel()
		<-done
	}()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-retry.C:
				w.mu.Lock()
				w.sync(ctx)
				w.mu.Unlock()
			}
		}
	}()
	return p.Run(ctx)
}

// sync rewrites the group if it is dirty; w.mu is held.
func (w *Watcher) sync(ctx context.Context) {
	if !w.dirty {
		return
	}
	if err := w.install(ctx); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("update nexthop group", "err", err)
		}
		return
	}
	w.dirty = false
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

var bucketRE = regexp.MustCompile(`index (\d+) .*nhid (\d+)`)

// ParseBuckets reads `ip nexthop bucket show id G` output into bucket
// index → nexthop ID.
func ParseBuckets(out string) (map[int]int, error) {
	m := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		sub := bucketRE.FindStringSubmatch(line)
		if sub == nil {
			return nil, fmt.Errorf("nexthop bucket line %q: want \"index N ... nhid M\"", line)
		}
		i, err1 := strconv.Atoi(sub[1])
		n, err2 := strconv.Atoi(sub[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("nexthop bucket line %q: numbers out of range", line)
		}
		m[i] = n
	}
	return m, nil
}

// LabMembers returns the members for a lab client node: one per gateway of
// its cluster, reached over the client's direct LAN link to it, with the
// health responder at the gateway's node address and healthPort. Gateways
// come in plan order.
func LabMembers(plan *topology.Plan, client string, healthPort int) ([]Member, []*topology.PlanNode, error) {
	c, ok := plan.Node(client)
	if !ok {
		return nil, nil, fmt.Errorf("nexthop: no node %s in the lab", client)
	}
	var out []Member
	var gws []*topology.PlanNode
	for _, gw := range plan.Gateways(c.Cluster) {
		found := false
		for _, l := range plan.Links {
			if l.Class == topology.LAN && l.A.Node == client && l.B.Node == gw.ID {
				out = append(out, Member{Via: l.B.Addr.Addr(), Dev: l.A.Device,
					Health: netip.AddrPortFrom(gw.Addr, uint16(healthPort)).String()})
				gws = append(gws, gw)
				found = true
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("nexthop: %s has no LAN link to gateway %s", client, gw.ID)
		}
	}
	return out, gws, nil
}
