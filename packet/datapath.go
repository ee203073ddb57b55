package packet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/ring"
)

// Defaults of Config's zero fields.
const (
	DefaultPinRoot     = "/sys/fs/bpf/strait"
	DefaultTunnelPort  = 4789 // IANA's VXLAN port
	DefaultVNI         = 1
	DefaultUnderlayMTU = 1500
	DefaultPortMin     = 1024
	DefaultPortMax     = 65535
	DefaultIdle        = 5 * time.Minute
	DefaultFlowEntries = 65536
	DefaultNATEntries  = 65536
	DefaultTables      = 8
	// MaxFlowEntries bounds Config.FlowEntries.
	MaxFlowEntries = 1 << 24
	// DefaultProbePort is the port of the liveness probes the programs
	// answer (docs/packet.md, "Health"). It is matched inside tunnel
	// packets from a peer gateway to this node's own underlay address that
	// belong to no flow and no service, and on the LAN only in health
	// probes (package health's format) to this node's own addresses that
	// are no import's, so it takes no port of the node from anything else.
	DefaultProbePort = 4790

	// MinUnderlayMTU is the smallest UnderlayMTU: 576 bytes of IPv4, which
	// every host must take, inside VXLAN.
	MinUnderlayMTU = 576 + vxlanOverhead

	// vxlanOverhead is what VXLAN adds in front of an inner Ethernet
	// frame: outer IPv4 (20), UDP (8), VXLAN (8) and inner Ethernet (14).
	vxlanOverhead = 50
	// maxRules bounds the compiled policy rules (MAX_RULES in the C).
	maxRules  = 1024
	maxTables = 64
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// Config configures one gateway node's packet data plane. The zero value of
// every field but Name and LAN picks the default named beside it.
type Config struct {
	// Name identifies the gateway: its pins live in PinRoot/Name. A DNS
	// label of at most 32 characters.
	Name string
	// PinRoot is a directory on a bpffs mount (default DefaultPinRoot).
	// `ip netns exec` remounts /sys and hides /sys/fs/bpf from what it
	// starts: give such gateways a bpffs mounted elsewhere.
	PinRoot string
	// LAN is the interface toward the cluster's nodes: clients' packets to
	// imports and targets' replies arrive on it. Needed by Attach.
	LAN string
	// Tunnel is the VXLAN device Attach creates in collect_md mode
	// (default "stv-" and Name, cut to 15 characters).
	Tunnel string
	// TunnelPort is the VXLAN UDP port (default 4789); peers must agree.
	TunnelPort uint16
	// VNI is the VXLAN network identifier, 1..16777215 (default 1).
	VNI uint32
	// SNAT is the address exported flows leave with toward their targets;
	// replies come back to it. It must be an address of this node that no
	// local socket uses for outgoing connections (a second address on the
	// LAN interface), since its ports belong to the programs' NAT. Only
	// gateways that export need one.
	SNAT netip.Addr
	// UnderlayMTU is the MTU between gateways (default 1500): TCP SYNs get
	// their MSS clamped to UnderlayMTU − 90 so that full segments fit
	// inside VXLAN without fragmenting, and the VXLAN device's MTU is
	// UnderlayMTU − 50. SetUnderlayMTU changes it on attached programs (the
	// gateway derives it from its routes to the peers: RouteMTU).
	UnderlayMTU int
	// PortMin..PortMax is the SNAT port range (default 1024..65535).
	PortMin, PortMax uint16
	// Idle is how long a NAT entry must be unused in both directions
	// before its SNAT port can be reused (default 5 minutes).
	Idle time.Duration
	// FlowEntries and NATEntries size the LRU flow and NAT maps (default
	// 65536 each); the oldest entries are evicted when they are full.
	FlowEntries, NATEntries int
	// Tables is how many exporting clusters' Maglev tables fit (default
	// 8, at most 64), each of ring.DefaultSize buckets.
	Tables int
	// ProbePort is the UDP port of the liveness probes peer gateways'
	// probers send through the tunnel (default DefaultProbePort; peers
	// must agree), and of the health probes the cluster's own nodes send
	// to this node's addresses on the LAN (the lab's nexthop watcher).
	// NoProbes makes the programs answer none: this node then looks dead
	// to peers' probers, which judge it by its sessions only if it never
	// answered.
	ProbePort uint16
	NoProbes  bool
}

func (c *Config) defaults() {
	if c.PinRoot == "" {
		c.PinRoot = DefaultPinRoot
	}
	if c.Tunnel == "" {
		c.Tunnel = "stv-" + c.Name
		if len(c.Tunnel) > unix.IFNAMSIZ-1 {
			c.Tunnel = c.Tunnel[:unix.IFNAMSIZ-1]
		}
	}
	if c.TunnelPort == 0 {
		c.TunnelPort = DefaultTunnelPort
	}
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.UnderlayMTU == 0 {
		c.UnderlayMTU = DefaultUnderlayMTU
	}
	if c.PortMin == 0 && c.PortMax == 0 {
		c.PortMin, c.PortMax = DefaultPortMin, DefaultPortMax
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.FlowEntries == 0 {
		c.FlowEntries = DefaultFlowEntries
	}
	if c.NATEntries == 0 {
		c.NATEntries = DefaultNATEntries
	}
	if c.Tables == 0 {
		c.Tables = DefaultTables
	}
	if c.ProbePort == 0 {
		c.ProbePort = DefaultProbePort
	}
}

// Validate checks c after filling in defaults, naming the field at fault.
func (c *Config) Validate() error {
	d := *c
	d.defaults()
	switch {
	case !nameRE.MatchString(d.Name):
		return fmt.Errorf("name %q: want a DNS label of 1..32 characters (a-z, 0-9, -)", d.Name)
	case !filepath.IsAbs(d.PinRoot):
		return fmt.Errorf("pinRoot %q: want an absolute path on a bpffs mount", d.PinRoot)
	case len(d.Tunnel) > unix.IFNAMSIZ-1 || strings.ContainsAny(d.Tunnel, "/ \t\n") || d.Tunnel == "":
		return fmt.Errorf("tunnel %q: want an interface name of 1..15 characters", d.Tunnel)
	case d.VNI >= 1<<24:
		return fmt.Errorf("vni %d: allowed 1..16777215", d.VNI)
	case d.SNAT.IsValid() && !d.SNAT.Unmap().Is4():
		return fmt.Errorf("snat %v: the packet mode carries IPv4 only", d.SNAT)
	case d.UnderlayMTU < MinUnderlayMTU || d.UnderlayMTU > 65535:
		return fmt.Errorf("underlayMTU %d: allowed %d..65535", d.UnderlayMTU, MinUnderlayMTU)
	case d.PortMin == 0 || d.PortMax < d.PortMin:
		return fmt.Errorf("ports %d..%d: want 1 ≤ portMin ≤ portMax ≤ 65535", d.PortMin, d.PortMax)
	case d.Idle < time.Second:
		return fmt.Errorf("idle %v: at least 1s", d.Idle)
	case d.FlowEntries < 1 || d.FlowEntries > MaxFlowEntries:
		return fmt.Errorf("flowEntries %d: allowed 1..%d", d.FlowEntries, MaxFlowEntries)
	case d.NATEntries < 1 || d.NATEntries > 1<<24:
		return fmt.Errorf("natEntries %d: allowed 1..%d", d.NATEntries, 1<<24)
	case d.Tables < 1 || d.Tables > maxTables:
		return fmt.Errorf("tables %d: allowed 1..%d", d.Tables, maxTables)
	}
	return nil
}

// MSS is the TCP MSS the programs clamp SYNs to when a peer's entry
// names none (Peer.MSS).
func (c *Config) MSS() uint16 {
	d := *c
	d.defaults()
	return MSSFor(d.UnderlayMTU)
}

// MSSFor is the MSS that fits TCP segments into an underlay of mtu bytes
// after VXLAN's 50 and IPv4's and TCP's 40; 0 for an MTU below
// MinUnderlayMTU or above 65535, which no setting allows.
func MSSFor(mtu int) uint16 {
	if mtu < MinUnderlayMTU || mtu > 65535 {
		return 0
	}
	return uint16(mtu - vxlanOverhead - 40)
}

// Dir is the gateway's pin directory.
func (c *Config) Dir() string {
	d := *c
	d.defaults()
	return filepath.Join(d.PinRoot, d.Name)
}

// Datapath is one gateway node's loaded programs and maps. Its methods
// replace map contents wholesale (what a reconcile wants: entries not
// given are deleted), and are not safe for concurrent use.
type Datapath struct {
	cfg  Config
	log  *slog.Logger
	coll *ebpf.Collection
	dir  string
	// buckets is each table slot's buckets as this process last wrote
	// them: a rewrite writes only the buckets that changed (a health
	// change moves a dead gateway's share, not the whole table).
	buckets map[int][][4]byte
	// maglev is the maglev map's memory, nil when pins of an earlier
	// version have it without a mapping.
	maglev []byte
	// settings is what Attach wrote into the config map (nil before), for
	// SetUnderlayMTU to rewrite.
	settings *settings
}

// maglevStride is a bucket's place in the mapped memory: the kernel rounds
// an array's values up to 8 bytes.
const maglevStride = 8

// link pin names in the gateway's directory.
const (
	pinLAN    = "link_lan_ingress"
	pinTunnel = "link_tun_ingress"
)

// Load loads the programs and creates, or adopts, the pinned maps of the
// gateway cfg names. It attaches nothing: Attach does, and tests that only
// run the programs with BPF_PROG_TEST_RUN stop here.
func Load(cfg Config, log *slog.Logger) (*Datapath, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkOS(); err != nil {
		return nil, err
	}
	if err := checkBPFFS(cfg.PinRoot); err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.PinRoot, cfg.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pin directory: %w", err)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	spec, err := loadPacket()
	if err != nil {
		return nil, err
	}
	spec.Maps["flows"].MaxEntries = uint32(cfg.FlowEntries)
	spec.Maps["nat"].MaxEntries = uint32(cfg.NATEntries)
	spec.Maps["rnat"].MaxEntries = uint32(cfg.NATEntries)
	spec.Maps["maglev"].MaxEntries = uint32(cfg.Tables * ring.DefaultSize)
	// The buckets are written through a memory mapping: a health change
	// rewrites a dead gateway's share of 65537 buckets, which took ~8 ms
	// of map updates on the loaded lab host against microseconds of
	// stores (docs/packet.md, "Health"). Pins of a version without the
	// mapping are adopted as they are, and written with map updates.
	spec.Maps["maglev"].Flags |= mapMmapable
	if old, err := ebpf.LoadPinnedMap(filepath.Join(dir, "maglev"), &ebpf.LoadPinOptions{ReadOnly: true}); err == nil {
		if info, err := old.Info(); err == nil && info.Flags&mapMmapable == 0 {
			spec.Maps["maglev"].Flags &^= mapMmapable
		}
		old.Close()
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: dir},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		switch {
		case errors.As(err, &ve):
			return nil, fmt.Errorf("the kernel's verifier rejected the programs (Linux 6.6 or later is needed): %w", err)
		case errors.Is(err, ebpf.ErrMapIncompatible):
			return nil, fmt.Errorf("pinned maps in %s do not match this version's (changed sizes or layout): tear the gateway's packet mode down first: %w", dir, err)
		}
		return nil, fmt.Errorf("load programs: %w", err)
	}
	d := &Datapath{cfg: cfg, log: log, coll: coll, dir: dir}
	// What the programs copied from peers under the pinned epoch may be
	// older than the map: a process of a version before the epoch wrote
	// peers (or exports) without advancing it.
	if err := d.advanceEpoch(); err != nil {
		coll.Close()
		return nil, err
	}
	if spec.Maps["maglev"].Flags&mapMmapable != 0 {
		size := (int(spec.Maps["maglev"].MaxEntries)*maglevStride + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
		if d.maglev, err = unix.Mmap(coll.Maps["maglev"].FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			coll.Close()
			return nil, fmt.Errorf("map the maglev buckets: %w", err)
		}
	}
	return d, nil
}

// Attach creates the VXLAN device if it is missing, writes the settings
// and attaches the programs to LAN and the device through pinned tcx
// links. Links already pinned (by an earlier process) are updated to this
// process's programs in place, so forwarding never stops.
func (d *Datapath) Attach(ctx context.Context) error {
	if d.cfg.LAN == "" {
		return errors.New("lan: the interface toward the cluster is required to attach")
	}
	lan, err := net.InterfaceByName(d.cfg.LAN)
	if err != nil {
		return fmt.Errorf("lan %q: %w", d.cfg.LAN, err)
	}
	tun, err := d.ensureTunnel(ctx)
	if err != nil {
		return err
	}
	if err := d.enableForwarding(); err != nil {
		return err
	}
	if err := d.setTunnelMTU(); err != nil {
		return err
	}
	s := settings{
		TunIfindex: uint32(tun.Index), VNI: d.cfg.VNI, SNAT: d.cfg.SNAT, MSS: d.cfg.MSS(),
		PortMin: d.cfg.PortMin, PortMax: d.cfg.PortMax, Idle: d.cfg.Idle,
	}
	if !d.cfg.NoProbes {
		s.ProbePort = d.cfg.ProbePort
	}
	if err := d.coll.Maps["config"].Update(uint32(0), s, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	d.settings = &s
	// A device without a link-layer address (TUN, as the lab's link
	// emulator uses) hands the program bare IP packets.
	lanProg := "lan_ingress"
	if len(lan.HardwareAddr) == 0 {
		lanProg = "lan_ingress_l3"
	}
	if err := d.attach(pinLAN, lanProg, lan.Index); err != nil {
		return err
	}
	return d.attach(pinTunnel, "tun_ingress", tun.Index)
}

func (d *Datapath) attach(pin, prog string, ifindex int) error {
	path := filepath.Join(d.dir, pin)
	p := d.coll.Programs[prog]
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		defer l.Close()
		info, ierr := l.Info()
		if ierr == nil && info.TCX() != nil && int(info.TCX().Ifindex) == ifindex {
			if err := l.Update(p); err != nil {
				return fmt.Errorf("update pinned link %s: %w", path, err)
			}
			d.log.Info("packet: adopted pinned link", "link", pin, "ifindex", ifindex)
			return nil
		}
		// A link for another interface (the device was recreated): replace it.
		if err := l.Unpin(); err != nil {
			return fmt.Errorf("unpin stale link %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("load pinned link %s: %w", path, err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("attach %s: the kernel has no tcx (Linux 6.6 or later): %w", prog, err)
		}
		return fmt.Errorf("attach %s to ifindex %d: %w", prog, ifindex, err)
	}
	defer l.Close()
	if err := l.Pin(path); err != nil {
		return fmt.Errorf("pin link %s: %w", path, err)
	}
	return nil
}

func (d *Datapath) ensureTunnel(ctx context.Context) (*net.Interface, error) {
	if ifc, err := net.InterfaceByName(d.cfg.Tunnel); err == nil {
		return ifc, nil
	}
	steps := [][]string{
		{"link", "add", d.cfg.Tunnel, "type", "vxlan", "external", "nolearning",
			"dstport", fmt.Sprint(d.cfg.TunnelPort)},
		{"link", "set", d.cfg.Tunnel, "up"},
	}
	for _, args := range steps {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %v: %s (the kernel needs VXLAN)", strings.Join(args, " "), err, trimOut(out))
		}
	}
	ifc, err := net.InterfaceByName(d.cfg.Tunnel)
	if err != nil {
		return nil, fmt.Errorf("tunnel %q: %w", d.cfg.Tunnel, err)
	}
	return ifc, nil
}

// enableForwarding turns IPv4 forwarding on for the tunnel device alone:
// bpf_fib_lookup answers only for packets whose ingress device forwards,
// and the programs look up the route of every packet they decapsulate.
func (d *Datapath) enableForwarding() error {
	p := filepath.Join("/proc/sys/net/ipv4/conf", d.cfg.Tunnel, "forwarding")
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable forwarding on %s: %w", d.cfg.Tunnel, err)
	}
	return nil
}

// setTunnelMTU gives the VXLAN device the MTU of what fits the underlay
// inside VXLAN. The programs' redirects into it are not held to it (the
// kernel checks the encapsulated packet against the underlay route), but
// it says what they size for, and anything the kernel itself routes into
// the device gets the same limit.
func (d *Datapath) setTunnelMTU() error {
	l, err := netlink.LinkByName(d.cfg.Tunnel)
	if err != nil {
		return fmt.Errorf("tunnel %q: %w", d.cfg.Tunnel, err)
	}
	if mtu := d.cfg.UnderlayMTU - vxlanOverhead; l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("tunnel %q: set MTU %d: %w", d.cfg.Tunnel, mtu, err)
		}
	}
	return nil
}

// UnderlayMTU is the underlay MTU the programs size for (Config.UnderlayMTU,
// or the last SetUnderlayMTU).
func (d *Datapath) UnderlayMTU() int { return d.cfg.UnderlayMTU }

// SetUnderlayMTU makes attached programs size for an underlay of mtu bytes
// between gateway nodes: SYNs clamped to mtu − 90 from now on (flows
// already open keep the MSS they agreed), the VXLAN device's MTU mtu − 50.
// Before Attach it only changes what Attach will write.
func (d *Datapath) SetUnderlayMTU(mtu int) error {
	if mtu < MinUnderlayMTU || mtu > 65535 {
		return fmt.Errorf("underlayMTU %d: allowed %d..65535", mtu, MinUnderlayMTU)
	}
	if mtu == d.cfg.UnderlayMTU {
		// The settings may hold it while the device does not (its MTU
		// failed to change last time): make sure of the device again.
		if d.settings == nil {
			return nil
		}
		return d.setTunnelMTU()
	}
	old := d.cfg.UnderlayMTU
	d.cfg.UnderlayMTU = mtu
	if d.settings == nil {
		return nil
	}
	s := *d.settings
	s.MSS = d.cfg.MSS()
	if err := d.coll.Maps["config"].Update(uint32(0), s, ebpf.UpdateAny); err != nil {
		d.cfg.UnderlayMTU = old
		return fmt.Errorf("write settings: %w", err)
	}
	d.settings = &s
	return d.setTunnelMTU()
}

// SetLANProbes makes attached programs answer the LAN's health probes
// (answer true, as Attach leaves them) or leave them to the stack, which
// refuses them at once (no socket has the probe port), so that what
// spreads the cluster's clients over its gateways takes this node out
// while it is cut off from every peer gateway (docs/failover.md, "A
// gateway cut off from its peers"). Before Attach it does nothing.
func (d *Datapath) SetLANProbes(answer bool) error {
	if d.settings == nil || d.settings.LANQuiet == !answer {
		return nil
	}
	s := *d.settings
	s.LANQuiet = !answer
	if err := d.coll.Maps["config"].Update(uint32(0), s, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	d.settings = &s
	return nil
}

// MSS reads the MSS the programs clamp SYNs to from their pinned
// settings (what the last Attach or SetUnderlayMTU wrote, in any process).
func (d *Datapath) MSS() (uint16, error) {
	var s settings
	if err := d.coll.Maps["config"].Lookup(uint32(0), &s); err != nil {
		return 0, fmt.Errorf("read settings: %w", err)
	}
	return s.MSS, nil
}

func trimOut(b []byte) string { return strings.TrimSpace(string(b)) }

// Close releases this process's handles. Pinned maps and links stay, and
// so does forwarding. Close is idempotent.
func (d *Datapath) Close() error {
	if d.maglev != nil {
		_ = unix.Munmap(d.maglev)
		d.maglev = nil
	}
	if d.coll != nil {
		d.coll.Close()
		d.coll = nil
	}
	return nil
}

// Teardown detaches the programs, removes every pin of the gateway and the
// VXLAN device (when it runs in the device's network namespace), and
// closes d.
func (d *Datapath) Teardown(ctx context.Context) error {
	d.Close()
	return Teardown(ctx, d.cfg)
}

// Teardown removes what Attach and Load left for the gateway cfg names,
// without loading anything, so that it also works when the pins come from
// another version whose maps this one could not adopt: the pinned links
// (which detaches the programs), every other pin in the gateway's
// directory and the directory, and the VXLAN device if this network
// namespace has it. What it cannot remove it reports; the rest is still
// removed.
func Teardown(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := checkOS(); err != nil {
		return err
	}
	cfg.defaults()
	dir := filepath.Join(cfg.PinRoot, cfg.Name)
	var errs []error
	for _, pin := range []string{pinLAN, pinTunnel} {
		path := filepath.Join(dir, pin)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("load pinned link %s: %w", path, err))
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, err)
		}
		l.Close() // the last reference: the program detaches
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		// Removing a bpffs file unpins the map behind it.
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("unpin %s: %w", e.Name(), err))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if _, err := net.InterfaceByName(cfg.Tunnel); err == nil {
		if out, err := exec.CommandContext(ctx, "ip", "link", "del", cfg.Tunnel).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", cfg.Tunnel, err, trimOut(out)))
		}
	}
	return errors.Join(errs...)
}

// Program returns a loaded program by its C name (lan_ingress,
// lan_ingress_l3, tun_ingress), for BPF_PROG_TEST_RUN and run-time
// statistics.
func (d *Datapath) Program(name string) *ebpf.Program { return d.coll.Programs[name] }

// Tables is how many exporting clusters' Maglev tables the maps hold
// (Config.Tables).
func (d *Datapath) Tables() int { return d.cfg.Tables }

// SetImports makes the imports map hold exactly imports.
func (d *Datapath) SetImports(imports map[Service]Import) error {
	for s, v := range imports {
		if int(v.Table) >= d.cfg.Tables {
			return fmt.Errorf("import %v: table %d: allowed 0..%d", s, v.Table, d.cfg.Tables-1)
		}
	}
	return syncMap(d.coll.Maps["imports"], "imports", imports)
}

// SetExports makes the exports map hold exactly exports. The programs
// keep per-CPU copies of exports entries valid for the maps' epoch, so a
// change takes effect from the next packet on.
func (d *Datapath) SetExports(exports map[Service]Export) error {
	err := syncMap(d.coll.Maps["exports"], "exports", exports)
	// Even after a failed write: some entries may have changed.
	return errors.Join(err, d.advanceEpoch())
}

// SetPeers makes the peers map hold exactly peers, keyed by the peer
// gateways' underlay addresses: tunnel packets from any other address are
// dropped, and flows pinned to a gateway that is not Alive move.
func (d *Datapath) SetPeers(peers map[netip.Addr]Peer) error {
	m := make(map[addrValue]Peer, len(peers))
	for a, p := range peers {
		if !a.Unmap().Is4() {
			return fmt.Errorf("peer %v: the packet mode carries IPv4 only", a)
		}
		m[addrValue{a.Unmap()}] = p
	}
	err := syncMap(d.coll.Maps["peers"], "peers", m)
	// Even after a failed write: some entries may have changed.
	return errors.Join(err, d.advanceEpoch())
}

// advanceEpoch tells the programs that the peers or exports map changed:
// they keep copies of their entries (in flow entries and per CPU) that
// are valid only while peer_epoch holds the value they were read at
// (bpf/packet.c, peer_epoch). Called after every write of either; one
// process writes a gateway's maps, so the read and the write need no lock.
func (d *Datapath) advanceEpoch() error {
	m := d.coll.Maps["peer_epoch"]
	var e uint32
	if err := m.Lookup(uint32(0), &e); err != nil {
		return fmt.Errorf("peer epoch: %w", err)
	}
	if e++; e == 0 {
		e = 1 // 0 means none: every packet looks peers up
	}
	if err := m.Update(uint32(0), e, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("peer epoch: %w", err)
	}
	return nil
}

// SetPolicy makes the policy map hold exactly entries (see CompilePolicy).
func (d *Datapath) SetPolicy(entries map[PolicyKey]Verdict) error {
	return syncMap(d.coll.Maps["policy"], "policy", entries)
}

// SetTable writes an exporting cluster's Maglev table into slot index:
// every bucket gets the underlay address of its owner in t (a view from
// ring's WithDown included), addrs mapping t's members to addresses. A nil
// t clears the slot.
func (d *Datapath) SetTable(index int, t *ring.Table, addrs map[string]netip.Addr) error {
	if index < 0 || index >= d.cfg.Tables {
		return fmt.Errorf("table %d: allowed 0..%d", index, d.cfg.Tables-1)
	}
	tables := d.coll.Maps["tables"]
	prev := d.buckets[index]
	delete(d.buckets, index) // until this write succeeded
	if t == nil {
		return tables.Update(uint32(index), tableInfo{}, ebpf.UpdateAny)
	}
	seed, owners := t.Owners()
	if len(owners) > ring.DefaultSize {
		return fmt.Errorf("table %d: %d buckets, at most %d", index, len(owners), ring.DefaultSize)
	}
	members := t.Members()
	byIndex := make([][4]byte, len(members))
	for i, m := range members {
		a, ok := addrs[m]
		if !ok || !a.Unmap().Is4() {
			return fmt.Errorf("table %d: member %q has no IPv4 underlay address", index, m)
		}
		byIndex[i] = a.Unmap().As4()
	}
	base := uint32(index * ring.DefaultSize)
	all := make([][4]byte, len(owners))
	keys := make([]uint32, 0, len(owners))
	vals := make([][4]byte, 0, len(owners))
	for i, o := range owners {
		if o != ring.NoMember {
			all[i] = byIndex[o]
		}
		if len(prev) != len(owners) || prev[i] != all[i] {
			keys = append(keys, base+uint32(i))
			vals = append(vals, all[i])
		}
	}
	switch {
	case len(keys) == 0:
	case d.maglev != nil:
		// Each bucket is one atomic aligned 4-byte store: the programs
		// read a bucket's old or new gateway, never a mix of the two.
		for i, k := range keys {
			if int(k)*maglevStride+4 > len(d.maglev) {
				return fmt.Errorf("table %d: bucket %d beyond the mapped map", index, k)
			}
			(*atomic.Uint32)(unsafe.Pointer(&d.maglev[k*maglevStride])).Store(ne.Uint32(vals[i][:]))
		}
	default:
		if _, err := d.coll.Maps["maglev"].BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("table %d: write buckets: %w", index, err)
		}
	}
	// The size goes in last: the program reads buckets only below it.
	info := tableInfo{Seed: seed, Size: uint32(len(owners)), Base: base}
	if err := tables.Update(uint32(index), info, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("table %d: %w", index, err)
	}
	if d.buckets == nil {
		d.buckets = map[int][][4]byte{}
	}
	d.buckets[index] = all
	return nil
}

// Flows returns the pinned flows and their gateways.
func (d *Datapath) Flows() (map[Flow]netip.Addr, error) {
	out := map[Flow]netip.Addr{}
	var k Flow
	var v addrValue
	it := d.coll.Maps["flows"].Iterate()
	for it.Next(&k, &v) {
		out[k] = v.Addr
	}
	return out, it.Err()
}

// FlowMapUse returns how many flows the flow map holds and how many it
// can (Config.FlowEntries of the programs loaded). A full map evicts its
// least recently used entry for each new flow, which the programs count
// as a placement like any other (import_flows): with the map full,
// placements go on rising while the entries stay at the size
// (docs/packet.md, "A full flow map"). It reads the map in batches of
// flowBatch entries, a system call each; a kernel that cannot (before
// Linux 5.6, or a bucket larger than a batch) has its keys walked, a
// system call per entry. Either way an entry evicted under the read may
// make the kernel start over, so the count is capped at the size.
func (d *Datapath) FlowMapUse() (entries, size int, err error) {
	m := d.coll.Maps["flows"]
	size = int(m.MaxEntries())
	entries, err = batchCountFlowMap(m, size)
	if err != nil {
		entries, err = walkFlowMap(m, size)
	}
	return entries, size, err
}

// batchCountFlowMap counts m's entries flowBatch per system call. It fails
// on a kernel without batch reads and on a hash bucket larger than a batch.
func batchCountFlowMap(m *ebpf.Map, size int) (entries int, err error) {
	keys := make([][flowLen]byte, min(flowBatch, size))
	vals := make([][flowValueLen]byte, len(keys))
	var cursor ebpf.MapBatchCursor
	for entries < size {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		entries += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("flows: %w", err)
		}
	}
	return min(entries, size), nil
}

// flowBatch is how many flow map entries one system call reads.
const flowBatch = 4096

// walkFlowMap counts m's entries key by key, at most size.
func walkFlowMap(m *ebpf.Map, size int) (entries int, err error) {
	var k, next [flowLen]byte
	var prev any // nil: the first key
	for entries < size {
		if err := m.NextKey(prev, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return entries, fmt.Errorf("flows: %w", err)
		}
		entries++
		k = next
		prev = &k
	}
	return entries, nil
}

// Flow returns the gateway a flow is pinned to, if it is.
func (d *Datapath) Flow(f Flow) (netip.Addr, bool) {
	var v addrValue
	if err := d.coll.Maps["flows"].Lookup(f, &v); err != nil {
		return netip.Addr{}, false
	}
	return v.Addr, true
}

// ClearFlows empties the flow map.
func (d *Datapath) ClearFlows() error {
	return syncMap(d.coll.Maps["flows"], "flows", map[Flow]addrValue{})
}

// syncMap makes m hold exactly want: it writes every entry, then deletes
// the keys m holds that want lacks (read as raw bytes, so that entries this
// version cannot decode are removed too).
func syncMap[K comparable, V any](m *ebpf.Map, name string, want map[K]V) error {
	keep := make(map[string]bool, len(want))
	for k, v := range want {
		kb, err := marshal(k)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := m.Update(kb, v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("%s: update %v: %w", name, k, err)
		}
		keep[string(kb)] = true
	}
	var stale [][]byte
	kb := make([]byte, m.KeySize())
	vb := make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(kb, vb) {
		if !keep[string(kb)] {
			stale = append(stale, append([]byte(nil), kb...))
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: iterate: %w", name, err)
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("%s: delete: %w", name, err)
		}
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	if m, ok := v.(interface{ MarshalBinary() ([]byte, error) }); ok {
		return m.MarshalBinary()
	}
	return nil, fmt.Errorf("%T has no binary encoding", v)
}
