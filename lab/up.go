package lab

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/emulator"
	"github.com/strait-net/strait/lab/topology"
)

// Up creates every namespace, link, address and route of plan and records
// the lab in its state directory. If anything fails, it removes what it
// created before returning the error.
func Up(ctx context.Context, plan *topology.Plan, opts Options) (lab *Lab, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := ValidName(plan.Name); err != nil {
		return nil, err
	}
	log := opts.logger().With("lab", plan.Name)
	if existing, _ := List(ctx, opts); slices.Contains(existing, plan.Name) {
		return nil, fmt.Errorf("lab %s is already up (or left over): run `strait lab down %s` first", plan.Name, plan.Name)
	}
	dir := filepath.Join(opts.stateDir(), plan.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lab = &Lab{Plan: plan, Dir: dir, Backend: BackendNone, Created: time.Now().UTC()}
	defer func() {
		if err != nil {
			// Teardown must run even if ctx was cancelled (Ctrl-C during up).
			if derr := Down(context.WithoutCancel(ctx), plan.Name, opts); derr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", derr))
			}
			lab = nil
		}
	}()
	// Record the plan first so that Down finds everything even if Up dies
	// half way.
	if err := lab.save(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := createNodes(ctx, plan); err != nil {
		return nil, err
	}
	var kinds []string
	var why string
	if lab.Backend, kinds, why, err = chooseBackends(ctx, plan, opts); err != nil {
		return nil, err
	}
	if why != "" {
		log.Info("emulation backend fallback", "reason", why)
	}
	if err := lab.save(); err != nil {
		return nil, err
	}
	var emulated []emulator.Link
	var veths []topology.PlanLink
	var vethKinds []string
	for i, l := range plan.Links {
		switch kinds[i] {
		case BackendUserspace, BackendSplit:
			emulated = append(emulated, emulator.Link{
				Name: l.Name,
				A:    emulator.Endpoint{Netns: l.A.Netns, Device: l.A.Device},
				B:    emulator.Endpoint{Netns: l.B.Netns, Device: l.B.Device},
				AtoB: l.AtoB, BtoA: l.BtoA,
				MTU:  l.LinkMTU(),
				Veth: kinds[i] == BackendSplit,
			})
		}
		if kinds[i] != BackendUserspace {
			veths = append(veths, l)
			vethKinds = append(vethKinds, kinds[i])
		}
	}
	if err := createVeths(ctx, veths, vethKinds, log); err != nil {
		return nil, err
	}
	if len(emulated) > 0 {
		// The seed of every random draw (loss, jitter) is recorded, so a
		// run's impairments can be replayed.
		lab.EmulatorSeed = randomSeed()
		if lab.EmulatorPID, err = startEmulator(ctx, dir, emulated, lab.EmulatorSeed, opts); err != nil {
			return nil, err
		}
		if err := lab.save(); err != nil {
			return nil, err
		}
	}
	if err := addressAndRoute(ctx, plan); err != nil {
		return nil, err
	}
	attrs := []any{"nodes", len(plan.Nodes), "links", len(plan.Links),
		"emulated", len(emulated), "backend", lab.Backend}
	if tbf := tbfSummaries(plan, kinds); len(tbf) > 0 {
		attrs = append(attrs, "tbf", strings.Join(tbf, "; "))
	}
	if k := kernelSummaries(plan, kinds, BackendKernel); len(k) > 0 {
		attrs = append(attrs, BackendKernel, strings.Join(k, "; "))
	}
	if k := kernelSummaries(plan, kinds, BackendSplit); len(k) > 0 {
		attrs = append(attrs, BackendSplit, strings.Join(k, "; "))
	}
	log.Info("lab up", append(attrs, "took", time.Since(start).Round(time.Millisecond))...)
	return lab, lab.save()
}

// createNodes adds the namespaces and sets their sysctls. Forwarding is on
// everywhere because any node may sit on a path; reverse-path filtering is
// off because ECMP replies may return on another link.
func createNodes(ctx context.Context, plan *topology.Plan) error {
	var lines []string
	for _, n := range plan.Nodes {
		lines = append(lines, "netns add "+n.Netns)
	}
	if err := ipBatch(ctx, "", lines); err != nil {
		return err
	}
	ccs := map[string]bool{}
	for _, n := range plan.Nodes {
		ccs[n.CongestionControl] = true
	}
	if err := allowCongestionControls(ccs); err != nil {
		return err
	}
	for _, n := range plan.Nodes {
		sysctls := []string{
			"net.ipv4.ip_forward=1",
			"net.ipv4.conf.all.rp_filter=0",
			"net.ipv4.conf.default.rp_filter=0",
			// Every connection starts from the same state, as on a fresh host:
			// no cached ssthresh or RTT from an earlier request.
			"net.ipv4.tcp_no_metrics_save=1",
			// A proxy closes first toward its backend when the client
			// half-closes, so gateways (and load generators) collect
			// TIME_WAIT sockets to one ip:port: about 1700 per exporting
			// gateway in a 6 s phase of 2000 new connections/s. Reusing
			// them for new outgoing connections (safe with timestamps,
			// the kernel's default) keeps the port range from running out,
			// as operators of proxy nodes configure it.
			"net.ipv4.tcp_tw_reuse=1",
			"net.ipv6.conf.all.disable_ipv6=1",
			"net.ipv6.conf.default.disable_ipv6=1",
		}
		if n.CongestionControl != "" {
			sysctls = append(sysctls, "net.ipv4.tcp_congestion_control="+n.CongestionControl)
		}
		// A new namespace starts with the kernel's default socket buffer
		// limits, not the host's: a process asking for a large buffer (as
		// wireguard-go and iperf3 do) would get 208 KiB and drop packets
		// that it keeps up with on the host.
		sysctls = append(sysctls, hostBufferLimits...)
		args := append([]string{"netns", "exec", n.Netns, "sysctl", "-q", "-w"}, sysctls...)
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
		lines := []string{
			"link set lo up",
			fmt.Sprintf("addr add %s/32 dev lo", n.Addr),
		}
		if err := ipBatch(ctx, n.Netns, lines); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
	}
	return nil
}

const allowedCCPath = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// hostBufferLimits are the host's socket buffer limits as sysctl
// assignments, read once.
var hostBufferLimits = func() []string {
	var out []string
	for _, key := range []string{"net.core.rmem_max", "net.core.wmem_max"} {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
		if err == nil {
			out = append(out, key+"="+strings.TrimSpace(string(b)))
		}
	}
	return out
}()

// allowCongestionControls adds ccs to the host's allowed list. A namespace
// other than the host's may only choose an allowed algorithm as its default,
// and Debian allows only reno and the host default out of the box.
func allowCongestionControls(ccs map[string]bool) error {
	b, err := os.ReadFile(allowedCCPath)
	if err != nil {
		return fmt.Errorf("read allowed congestion controls: %w", err)
	}
	allowed := strings.Fields(string(b))
	changed := false
	for cc := range ccs {
		if cc != "" && !slices.Contains(allowed, cc) {
			allowed = append(allowed, cc)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := os.WriteFile(allowedCCPath, []byte(strings.Join(allowed, " ")), 0o644); err != nil {
		return fmt.Errorf("allow congestion controls %v (is the module loaded? see tcp_available_congestion_control): %w", allowed, err)
	}
	return nil
}

// BackendKernel carries a link whose directions hold no packet back (no
// delay, no jitter: loss, loss correlation, rate) in the kernel: a tcx
// program on the receiving end drops (emulator.AttachLoss), a tbf on the
// sending end caps the rate. Through the userspace emulator such a
// direction paid the reader's thread wake-up, 40-45 µs per packet on a VM
// (docs/topology.md, "Accuracy").
const BackendKernel = "kernel"

// BackendSplit carries a link delayed one way only on a veth pair: the
// undelayed direction is the kernel's, as with BackendKernel, and the
// delayed one detours through the userspace emulator (emulator.Link.Veth).
// Through a pair of TUN devices the undelayed direction paid the emulator
// reader's wake-up, 38-44 µs per packet on a VM (docs/topology.md,
// "Accuracy").
const BackendSplit = "split"

// probeTCX reports whether tcx programs can be attached in netns; a
// variable so that the choice's tests need no namespace.
var probeTCX = func(_ context.Context, netns string) error { return emulator.ProbeTCX(netns) }

// chooseBackends picks the backend of every link of plan (BackendNone for a
// link without impairment) and names the lab's backend: the one its
// emulated links use, or those joined by "+" when they use several. Auto
// gives rate-only links tbf, which shapes in the kernel without the
// userspace emulator's per-packet CPU cost, other links without delay or
// jitter either way the kernel backend (BackendKernel), and the others
// netem if the kernel has it (probed in one of the lab's own namespaces,
// so the probe leaves nothing on the host); without netem, links delayed
// one way only get BackendSplit and the others the userspace emulator.
// The kernel and split backends need tcx (Linux 6.6), probed likewise:
// without it auto gives their links netem, or else the userspace emulator,
// and why says so (empty when nothing fell back). An explicit emulator gives every
// link it can carry the same backend.
func chooseBackends(ctx context.Context, plan *topology.Plan, opts Options) (backend string, kinds []string, why string, err error) {
	want := opts.Emulator
	if want == "" {
		want = plan.Emulator
	}
	if want == "" {
		want = BackendAuto
	}
	kinds = make([]string, len(plan.Links))
	var general, oneWay, undelayedLinks []int // emulated links that tbf cannot shape
	for i, l := range plan.Links {
		switch {
		case !l.Emulated():
			kinds[i] = BackendNone
		case rateOnly(l) && (want == BackendAuto || want == BackendTBF):
			kinds[i] = BackendTBF
		case undelayed(l) && want == BackendAuto:
			undelayedLinks = append(undelayedLinks, i)
		case delayedOneWay(l) && want == BackendAuto:
			oneWay = append(oneWay, i)
		case want == BackendTBF:
			return "", nil, "", fmt.Errorf("emulator tbf: link %s is not rate-only (%s / %s): tbf only caps the rate; use emulator: auto", l.Name, l.AtoB, l.BtoA)
		default:
			general = append(general, i)
		}
	}
	netns := func() string { return plan.Nodes[0].Netns }
	var netemErr error
	netemProbed := false
	haveNetem := func() bool {
		if !netemProbed {
			netemErr, netemProbed = probeNetem(ctx, netns()), true
		}
		return netemErr == nil
	}
	if len(oneWay) > 0 && haveNetem() {
		// netem delays in the kernel one way as well as both.
		general = append(general, oneWay...)
		oneWay = nil
	}
	if len(undelayedLinks)+len(oneWay) > 0 {
		kernelKind, splitKind := BackendKernel, BackendSplit
		if tcxErr := probeTCX(ctx, netns()); tcxErr != nil {
			kernelKind, splitKind = BackendUserspace, BackendUserspace
			if haveNetem() {
				kernelKind = BackendNetem
			}
			why = fmt.Sprintf("no tcx (Linux 6.6 or later) in this kernel (%v): links without delay, or delayed one way only, go to %s instead", tcxErr, kernelKind)
		}
		for _, i := range undelayedLinks {
			kinds[i] = kernelKind
		}
		for _, i := range oneWay {
			kinds[i] = splitKind
		}
	}
	if len(general) > 0 {
		kind := want
		if want == BackendAuto || want == BackendNetem {
			switch {
			case haveNetem():
				kind = BackendNetem
			case want == BackendNetem:
				return "", nil, "", fmt.Errorf("emulator netem: the kernel has no netem qdisc (%v); use emulator: userspace or auto", netemErr)
			default:
				kind = BackendUserspace
			}
		}
		for _, i := range general {
			kinds[i] = kind
		}
	}
	var used []string
	for _, k := range kinds {
		if k != BackendNone && !slices.Contains(used, k) {
			used = append(used, k)
		}
	}
	if len(used) == 0 {
		return BackendNone, kinds, why, nil
	}
	sort.Strings(used)
	return strings.Join(used, "+"), kinds, why, nil
}

// rateOnly reports whether every impaired direction of l only caps the rate.
func rateOnly(l topology.PlanLink) bool {
	for _, p := range []emulation.Params{l.AtoB, l.BtoA} {
		if !p.IsZero() && !p.RateOnly() {
			return false
		}
	}
	return true
}

// undelayed reports whether neither direction of l holds packets back.
func undelayed(l topology.PlanLink) bool {
	return l.AtoB.Undelayed() && l.BtoA.Undelayed()
}

// delayedOneWay reports whether exactly one direction of l holds packets
// back (delay or jitter).
func delayedOneWay(l topology.PlanLink) bool {
	return l.AtoB.Undelayed() != l.BtoA.Undelayed()
}

// probeNetem reports whether the kernel has netem, in netns; a variable so
// that the choice's tests need no namespace.
var probeNetem = probeNetemQdisc

func probeNetemQdisc(ctx context.Context, netns string) error {
	if _, err := run(ctx, "tc", "-n", netns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err != nil {
		return err
	}
	_, err := run(ctx, "tc", "-n", netns, "qdisc", "del", "dev", "lo", "root")
	return err
}

// tbfSummary states what a tbf-shaped direction is: its rate, bucket and
// queue, the queue also as line time (the worst queueing delay it adds).
func tbfSummary(p emulation.Params) string {
	return fmt.Sprintf("%s burst %d B queue %d B (%v)", emulation.FormatRate(p.Rate), p.TBFBurst(), p.TBFLimit(), p.TBFQueueTime().Round(time.Millisecond))
}

// tbfSummaries lists the distinct tbf shapings of plan's links, for the
// "lab up" log line.
func tbfSummaries(plan *topology.Plan, kinds []string) []string {
	var out []string
	for i, l := range plan.Links {
		if kinds[i] != BackendTBF {
			continue
		}
		for _, p := range []emulation.Params{l.AtoB, l.BtoA} {
			if s := tbfSummary(p); !p.IsZero() && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// kernelSummaries says, per impaired direction of the links backend
// (BackendKernel or BackendSplit) carries, what carries what, for the "lab
// up" log line. A split link names both directions, the undelayed one
// also when the kernel carries it unimpaired.
func kernelSummaries(plan *topology.Plan, kinds []string, backend string) []string {
	var out []string
	for i, l := range plan.Links {
		if kinds[i] != backend {
			continue
		}
		for _, d := range []struct {
			name string
			p    emulation.Params
		}{{"a-to-b", l.AtoB}, {"b-to-a", l.BtoA}} {
			if !d.p.Undelayed() {
				out = append(out, fmt.Sprintf("%s %s: %s (emulator, via a TAP device)", l.Name, d.name, d.p))
				continue
			}
			var parts []string
			if d.p.Loss > 0 {
				s := "loss " + emulation.FormatPercent(d.p.Loss)
				if d.p.LossCorrelation > 0 {
					s += " correlation " + emulation.FormatPercent(d.p.LossCorrelation)
				}
				parts = append(parts, s+" (bpf)")
			}
			if d.p.Rate != 0 {
				parts = append(parts, tbfSummary(d.p)+" (tbf)")
			}
			if len(parts) == 0 && backend == BackendSplit {
				parts = append(parts, "undelayed (veth)")
			}
			if len(parts) > 0 {
				out = append(out, fmt.Sprintf("%s %s: %s", l.Name, d.name, strings.Join(parts, ", ")))
			}
		}
	}
	return out
}

// createVeths makes the veth pairs of the links, kinds[i] being links[i]'s
// backend, and impairs each direction the kernel carries on its sending
// end (a split link's delayed direction is the emulator's, which starts
// later). With netem, segmentation offloads are turned off on
// impaired devices: a qdisc sees GSO super-packets, and one drop would
// remove a whole burst of segments. Tbf keeps them: it drops only from a
// full queue, as a real uplink does, and splits a super-packet larger than
// its bucket into segments itself.
func createVeths(ctx context.Context, links []topology.PlanLink, kinds []string, log *slog.Logger) error {
	var lines []string
	for _, l := range links {
		lines = append(lines, fmt.Sprintf("link add %s netns %s mtu %d type veth peer name %s netns %s mtu %d",
			l.A.Device, l.A.Netns, l.LinkMTU(), l.B.Device, l.B.Netns, l.LinkMTU()))
	}
	if err := ipBatch(ctx, "", lines); err != nil {
		return err
	}
	for i, l := range links {
		if kinds[i] == BackendKernel || kinds[i] == BackendSplit {
			if err := kernelLink(ctx, l, log); err != nil {
				return fmt.Errorf("link %s: %w", l.Name, err)
			}
			continue
		}
		if kinds[i] != BackendNetem && kinds[i] != BackendTBF {
			continue
		}
		for _, side := range []struct {
			end    topology.LinkEnd
			egress emulation.Params
		}{{l.A, l.AtoB}, {l.B, l.BtoA}} {
			if side.egress.IsZero() {
				continue
			}
			args := []string{"-n", side.end.Netns, "qdisc", "add", "dev", side.end.Device, "root", kinds[i]}
			if kinds[i] == BackendTBF {
				args = append(args, side.egress.TBFArgsMTU(l.LinkMTU())...)
				log.Debug("tbf", "link", l.Name, "dev", side.end.Device, "shaping", tbfSummary(side.egress))
			} else {
				args = append(args, side.egress.NetemArgs()...)
			}
			if _, err := run(ctx, "tc", args...); err != nil {
				return fmt.Errorf("link %s: %w", l.Name, err)
			}
			if kinds[i] == BackendTBF {
				continue
			}
			if _, err := run(ctx, "ip", "netns", "exec", side.end.Netns, "ethtool", "-K", side.end.Device, "tso", "off", "gso", "off", "gro", "off"); err != nil {
				return fmt.Errorf("link %s: %w", l.Name, err)
			}
		}
	}
	return nil
}

// kernelLink impairs the undelayed directions of the veth pair of a
// BackendKernel or BackendSplit link: per direction, a tbf on the sending
// end for a rate, and for loss a drop program on the receiving end's
// ingress, with the sending end's segmentation offloads off so that the
// program sees every packet at its own size (see emulator.KernelLoss). The
// program stays attached after this process exits and goes with the
// device when the lab is taken down. A split link's delayed direction is
// the emulator's (emulator.Link.Veth), which takes its packets before the
// sending end's qdisc.
func kernelLink(ctx context.Context, l topology.PlanLink, log *slog.Logger) error {
	for _, d := range []struct {
		from, to topology.LinkEnd
		p        emulation.Params
	}{{l.A, l.B, l.AtoB}, {l.B, l.A, l.BtoA}} {
		if !d.p.Undelayed() {
			continue
		}
		if d.p.Rate != 0 {
			args := append([]string{"-n", d.from.Netns, "qdisc", "add", "dev", d.from.Device, "root", "tbf"}, d.p.TBFArgsMTU(l.LinkMTU())...)
			if _, err := run(ctx, "tc", args...); err != nil {
				return err
			}
		}
		if d.p.Loss <= 0 {
			continue
		}
		if _, err := run(ctx, "ip", append([]string{"netns", "exec", d.from.Netns, "ethtool", "-K", d.from.Device}, noSegmentation...)...); err != nil {
			return err
		}
		k, err := emulator.AttachLoss(d.to.Netns, d.to.Device, d.p)
		if err != nil {
			return err
		}
		k.Close()
		log.Debug("kernel loss", "link", l.Name, "dev", d.to.Device, "params", d.p.String())
	}
	return nil
}

// noSegmentation are the ethtool features to turn off on a sending veth so
// that the kernel splits every segmentation offload packet (TCP, UDP, and
// tunnelled ones) before it crosses the pair.
var noSegmentation = []string{"tso", "off", "gso", "off", "tx-udp-segmentation", "off",
	"tx-udp_tnl-segmentation", "off", "tx-udp_tnl-csum-segmentation", "off", "tx-gso-list", "off"}

const (
	emulatorConfig = "emulator.json"
	emulatorLog    = "emulator.log"
)

// startEmulator starts `strait lab emulate` as a daemon in its own session,
// so it outlives `strait lab up`, and waits until every TUN device exists.
func startEmulator(ctx context.Context, dir string, links []emulator.Link, seed uint64, opts Options) (int, error) {
	binary := opts.Binary
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return 0, fmt.Errorf("find strait binary for the emulator: %w", err)
		}
		binary = exe
	}
	ready := filepath.Join(dir, "emulator.ready")
	cfg := emulator.Config{Links: links, ReadyFile: ready, Seed: seed}
	if err := cfg.Validate(); err != nil {
		return 0, fmt.Errorf("emulator config: %w", err)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return 0, err
	}
	cfgPath := filepath.Join(dir, emulatorConfig)
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(dir, emulatorLog))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(binary, "lab", "emulate", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start emulator: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return cmd.Process.Pid, nil
		}
		select {
		case err := <-exited:
			logb, _ := os.ReadFile(filepath.Join(dir, emulatorLog))
			return 0, fmt.Errorf("emulator exited before it was ready (%v): %s", err, strings.TrimSpace(string(logb)))
		case <-deadline:
			return cmd.Process.Pid, fmt.Errorf("emulator not ready after 30s; see %s", filepath.Join(dir, emulatorLog))
		case <-ctx.Done():
			return cmd.Process.Pid, ctx.Err()
		case <-tick.C:
		}
	}
}

// addressAndRoute configures every namespace with one ip batch each.
func addressAndRoute(ctx context.Context, plan *topology.Plan) error {
	perNetns := map[string][]string{}
	for _, l := range plan.Links {
		for _, e := range []topology.LinkEnd{l.A, l.B} {
			perNetns[e.Netns] = append(perNetns[e.Netns],
				fmt.Sprintf("addr add %s dev %s", e.Addr, e.Device),
				fmt.Sprintf("link set %s up", e.Device))
		}
	}
	for _, n := range plan.Nodes {
		for _, r := range n.Routes {
			perNetns[n.Netns] = append(perNetns[n.Netns], routeLine(r))
		}
	}
	names := make([]string, 0, len(perNetns))
	for ns := range perNetns {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		if err := ipBatch(ctx, ns, perNetns[ns]); err != nil {
			return err
		}
	}
	return nil
}

func routeLine(r topology.Route) string {
	var b strings.Builder
	fmt.Fprintf(&b, "route add %s", r.Dst)
	// ip wants src before the nexthop list: after it, "src" would be
	// read as the start of another nexthop.
	if r.Src != (netip.Addr{}) {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if len(r.NextHops) == 1 {
		fmt.Fprintf(&b, " via %s dev %s", r.NextHops[0].Via, r.NextHops[0].Device)
	} else {
		for _, h := range r.NextHops {
			fmt.Fprintf(&b, " nexthop via %s dev %s", h.Via, h.Device)
		}
	}
	return b.String()
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0, which means "pick one"
}
