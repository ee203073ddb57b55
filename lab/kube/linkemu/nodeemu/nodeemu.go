// Package nodeemu impairs one node's traffic toward other clusters: the part
// of lab/kube/linkemu that runs on the node (`strait lab node-emulate`, in a
// privileged hostNetwork pod), docs/lab-clusters-emulation.md.
//
// Design. A tc program (tcx) on the egress of every interface that routes
// toward Remote takes the IPv4 packets whose destination is in Remote and
// redirects them into an impairment device; a second program on that
// device's far end marks what comes out and sends it on out of the same
// interface with bpf_redirect_neigh; the mark makes the first program let
// those packets pass. So:
//   - only egress toward Remote is impaired: every other packet, and all
//     received traffic (the reply path), never meets the programs' redirect;
//   - packets are taken after netfilter (tc egress is in the transmit path),
//     NATed as they leave the node, and put back without crossing netfilter
//     again, so conntrack sees each packet once (re-injecting through the
//     forwarding path would make a second conntrack entry for masqueraded
//     flows, whose reply tuple clashes with the first and is dropped);
//   - no route, rule, sysctl or nftables rule is added: the tcx links die
//     with the process, and a TUN with its file descriptor, so even a
//     SIGKILLed agent leaves nothing but a veth pair (kernel qdisc backends),
//     which Clean removes by name.
//
// The impairment device is, by Backend: a veth pair whose first end has a
// tbf (rate-only params) or netem qdisc as root; or a TUN pair of strait's
// userspace emulator (lab/emulator), reading the first and writing the
// impaired packets into the second.
package nodeemu

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/emulator"
)

// Backend names how the params are applied.
type Backend string

const (
	TBF       Backend = "tbf"       // rate-only params: kernel token bucket
	Netem     Backend = "netem"     // kernel netem, where the node's kernel has it
	Userspace Backend = "userspace" // strait's emulator on a TUN pair
)

// Config is one node's emulation.
type Config struct {
	Run    string         // the lab run; device names and the mark derive from it
	Remote []netip.Prefix // destinations whose traffic is impaired
	Params emulation.Params
	Seed   uint64 // of the userspace emulator; 0 = random
	// ResetPorts, once the emulation is in place and before Ready is
	// written, ends this node's TCP connections toward Remote whose
	// local or peer port is one of them (ResetConnections: e.g. strait
	// gateways' sessions, which would otherwise carry what they learnt
	// of the path before the emulation).
	ResetPorts []uint16
	// Ready, if set, is written (atomically) once the emulation is in place
	// and removed when it is gone.
	Ready  string
	Logger *slog.Logger
}

// Prefix is what every device of run's emulation is named with: "stk" and
// eight hex digits of a hash of the run label, so Clean finds a crashed
// agent's leftovers, and an interface name (15 bytes) still has room.
func Prefix(run string) string {
	if run == "" {
		return devPrefix
	}
	h := fnv.New32a()
	h.Write([]byte(run))
	return fmt.Sprintf("%s%08x", devPrefix, h.Sum32())
}

const devPrefix = "stk"

// Mark is the packet mark of impaired packets re-sent by run's programs.
func Mark(run string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(run))
	return 0x57000000 | h.Sum32()&0xffffff
}

// ChooseBackend picks the backend for p: tbf for rate-only params; netem if
// the kernel has it and p has no loss (tc sees segmentation-offload
// super-packets, so one netem drop would remove a burst; the namespace lab
// turns offloads off on its own veths, but on a node's real interface that
// would slow all its traffic); the userspace emulator otherwise.
func ChooseBackend(p emulation.Params, haveNetem bool) Backend {
	switch {
	case p.RateOnly():
		return TBF
	case haveNetem && netemFits(p):
		return Netem
	}
	return Userspace
}

// netemFits: netem would carry p as the namespace lab's emulator does (no
// loss, see ChooseBackend; the uniform jitter netem has without a table).
func netemFits(p emulation.Params) bool {
	return p.Loss == 0 && p.Dist() == emulation.Uniform
}

// NetemProbe reports whether the node's kernel takes a netem qdisc.
type NetemProbe func() bool

// chooseOnNode is ChooseBackend on a node, asking probe only where netem
// could be chosen: the probe creates and deletes a veth pair. Run's choice
// goes through here, so a unit test covers it with a probe of its own
// (this lab's kernel has no netem; docs/lab-clusters-emulation.md).
func chooseOnNode(p emulation.Params, probe NetemProbe) Backend {
	if p.RateOnly() || !netemFits(p) {
		return ChooseBackend(p, false)
	}
	return ChooseBackend(p, probe())
}

// path is the impairment of one interface.
type path struct {
	iface   netlink.Link
	a, b    string // impairment device ends: packets enter a, leave b
	veth    bool
	links   []link.Link
	progs   []*ebpf.Program
	backend Backend
}

// Run puts the emulation in place, writes Ready, waits for ctx, and removes
// everything it added. Stale devices of the same run (a crashed agent) are
// removed first.
func Run(ctx context.Context, cfg Config) (err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Run == "" {
		return errors.New("run: must not be empty")
	}
	if err := cfg.Params.Validate(); err != nil {
		return fmt.Errorf("emulation: %w", err)
	}
	if cfg.Params.IsZero() {
		return errors.New("emulation: none given (a zero emulation needs no agent)")
	}
	if err := checkCaps(); err != nil {
		return err
	}
	if removed, err := Clean(cfg.Run); err != nil {
		return fmt.Errorf("remove stale state: %w", err)
	} else if len(removed) > 0 {
		log.Info("removed leftovers of an earlier agent", "devices", removed)
	}
	ifaces, err := egressInterfaces(cfg.Remote, log)
	if err != nil {
		return err
	}
	prefix := Prefix(cfg.Run)
	mark := Mark(cfg.Run)
	var paths []*path
	defer func() {
		for _, p := range paths {
			p.close()
		}
	}()

	backend := chooseOnNode(cfg.Params, func() bool { return probeNetem(prefix, log) })
	var emuLinks []emulator.Link
	for i, ifc := range ifaces {
		p := &path{iface: ifc, a: fmt.Sprintf("%s%da", prefix, i), b: fmt.Sprintf("%s%db", prefix, i), backend: backend}
		paths = append(paths, p)
		if backend == Userspace {
			emuLinks = append(emuLinks, emulator.Link{Name: ifc.Attrs().Name,
				A: emulator.Endpoint{Device: p.a}, B: emulator.Endpoint{Device: p.b}, AtoB: cfg.Params,
				MTU: ifc.Attrs().MTU})
			continue
		}
		p.veth = true
		if err := p.addVeth(cfg.Params); err != nil {
			return fmt.Errorf("interface %s: %w", ifc.Attrs().Name, err)
		}
	}

	emuDone := make(chan error, 1)
	emuCtx, stopEmu := context.WithCancel(context.Background())
	started := false
	defer func() {
		stopEmu()
		if started {
			if e := <-emuDone; e != nil && err == nil {
				err = fmt.Errorf("userspace emulator: %w", e)
			}
		}
	}()
	if len(emuLinks) > 0 {
		// Beside Ready: the image has no /tmp.
		dir := os.TempDir()
		if cfg.Ready != "" {
			dir = filepath.Dir(cfg.Ready)
		}
		ready := filepath.Join(dir, "emulator-"+prefix+".ready")
		_ = os.Remove(ready)
		started = true
		go func() {
			emuDone <- emulator.Run(emuCtx, emulator.Config{Links: emuLinks, Seed: cfg.Seed, ReadyFile: ready, Logger: log.With("component", "emulator")})
		}()
		if err := waitFile(ctx, ready, emuDone); err != nil {
			return fmt.Errorf("userspace emulator: %w", err)
		}
	}

	for _, p := range paths {
		if err := p.attach(cfg.Remote, mark); err != nil {
			return fmt.Errorf("interface %s: %w", p.iface.Attrs().Name, err)
		}
		log.Info("emulation in place", "interface", p.iface.Attrs().Name, "backend", p.backend,
			"via", p.a+">"+p.b, "remote", cfg.Remote, "params", cfg.Params.String())
	}
	if len(cfg.ResetPorts) > 0 {
		// A failure leaves the emulation as good as without the reset:
		// logged, not fatal.
		ended, err := ResetConnections(cfg.Remote, cfg.ResetPorts)
		if err != nil {
			log.Warn("connections toward remote not reset: they keep what they learnt of the path before the emulation", "ports", cfg.ResetPorts, "ended", ended, "err", err)
		} else {
			log.Info("connections toward remote reset", "ports", cfg.ResetPorts, "ended", ended)
		}
	}
	if cfg.Ready != "" {
		if err := writeFile(cfg.Ready, string(backend)+"\n"); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
		defer os.Remove(cfg.Ready)
	}
	select {
	case <-ctx.Done():
		log.Info("removing the emulation")
		return nil
	case err := <-emuDone:
		emuDone <- err // for the deferred wait
		return fmt.Errorf("userspace emulator stopped: %v", err)
	}
}

// egressInterfaces returns the interfaces the node routes remote through,
// one each. Prefixes without a route are skipped (nothing is sent there);
// none routed at all is an error.
func egressInterfaces(remote []netip.Prefix, log *slog.Logger) ([]netlink.Link, error) {
	if len(remote) == 0 {
		return nil, errors.New("remote: no destination prefixes given")
	}
	seen := map[int]bool{}
	var out []netlink.Link
	var unrouted []string
	for _, pfx := range remote {
		if !pfx.Addr().Is4() {
			log.Warn("IPv6 destination not impaired (the node agent handles IPv4)", "prefix", pfx)
			continue
		}
		routes, err := netlink.RouteGet(net.IP(pfx.Masked().Addr().AsSlice()))
		if err != nil || len(routes) == 0 {
			unrouted = append(unrouted, pfx.String())
			continue
		}
		ifc, err := netlink.LinkByIndex(routes[0].LinkIndex)
		if err != nil {
			return nil, fmt.Errorf("route to %s: interface %d: %w", pfx, routes[0].LinkIndex, err)
		}
		if ifc.Attrs().Flags&net.FlagLoopback != 0 {
			unrouted = append(unrouted, pfx.String()+" (local)")
			continue
		}
		if seen[ifc.Attrs().Index] {
			continue
		}
		if ifc.Attrs().EncapType != "ether" {
			return nil, fmt.Errorf("route to %s: interface %s is %s, not Ethernet (the node agent impairs Ethernet interfaces)", pfx, ifc.Attrs().Name, ifc.Attrs().EncapType)
		}
		seen[ifc.Attrs().Index] = true
		out = append(out, ifc)
	}
	if len(unrouted) > 0 {
		log.Info("destinations this node has no route to (not impaired here)", "prefixes", unrouted)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no route from this node toward any of %v", remote)
	}
	if len(out) > 10 {
		return nil, fmt.Errorf("traffic toward %v leaves by %d interfaces; at most 10 are supported", remote, len(out))
	}
	return out, nil
}

// netemAttrs is the netem qdisc for params: delay and jitter in µs, the
// namespace lab's limit (netemLimit), tc's rate in bytes per second.
func netemAttrs(params emulation.Params) netlink.NetemQdiscAttrs {
	return netlink.NetemQdiscAttrs{Latency: uint32(params.Delay.Microseconds()), Jitter: uint32(params.Jitter.Microseconds()),
		Limit: uint32(netemLimit(params)), Rate64: params.Rate / 8}
}

// netemLimit is NetemArgs' limit, so netem holds what it holds in the
// namespace lab.
func netemLimit(p emulation.Params) int {
	args := p.NetemArgs()
	var n int
	fmt.Sscan(args[1], &n)
	return n
}

// attach brings the impairment device up and loads and attaches the two
// programs: the far end's first, so nothing is redirected into a device
// whose output goes nowhere.
func (p *path) attach(remote []netip.Prefix, mark uint32) error {
	for _, name := range []string{p.a, p.b} {
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0)
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("device %s: %w", name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
	}
	a, err := netlink.LinkByName(p.a)
	if err != nil {
		return err
	}
	b, err := netlink.LinkByName(p.b)
	if err != nil {
		return err
	}
	in := ingressSpec(mark, p.iface.Attrs().Index, !p.veth)
	if err := p.load(in, b.Attrs().Index, ebpf.AttachTCXIngress); err != nil {
		return fmt.Errorf("%s ingress: %w", p.b, err)
	}
	out, err := egressSpec(remote, mark, a.Attrs().Index)
	if err != nil {
		return err
	}
	if err := p.load(out, p.iface.Attrs().Index, ebpf.AttachTCXEgress); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

func (p *path) load(spec *ebpf.ProgramSpec, ifindex int, at ebpf.AttachType) error {
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		return fmt.Errorf("load program: %w", err)
	}
	p.progs = append(p.progs, prog)
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: at})
	if err != nil {
		return fmt.Errorf("attach tcx: %w", err)
	}
	p.links = append(p.links, l)
	return nil
}

// close detaches the node interface's program first (from then on nothing
// enters the impairment), then the rest.
func (p *path) close() {
	for i := len(p.links) - 1; i >= 0; i-- {
		_ = p.links[i].Close()
	}
	for _, prog := range p.progs {
		_ = prog.Close()
	}
	if p.veth {
		deleteLink(p.a)
	}
}

// Clean removes the devices a run's agent left behind (all runs' for run
// ""), and returns their names. Only veth pairs can be left: TUNs and tcx
// programs go with the process that held them.
func Clean(run string) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	prefix := Prefix(run)
	var removed []string
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, prefix) || !ours(name) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			// the peer of a pair deleted a moment ago is gone too
			if _, gone := netlink.LinkByName(name); gone == nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
				continue
			}
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// Leftovers lists the devices of run (all runs for "") present now.
func Leftovers(run string) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if name := l.Attrs().Name; strings.HasPrefix(name, Prefix(run)) && ours(name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// ours reports whether name has the form Prefix(run) makes: "stk", eight
// hex digits, then a suffix of two bytes.
func ours(name string) bool {
	if len(name) != len(devPrefix)+8+2 {
		return false
	}
	for _, c := range name[len(devPrefix) : len(devPrefix)+8] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func deleteLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

func waitFile(ctx context.Context, path string, died chan error) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-died:
			died <- err
			return fmt.Errorf("exited before it was ready: %v", err)
		case <-t.C:
		}
	}
}

func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
