// Package emulator is strait's userspace link emulator, for kernels without
// netem. An emulated link is a pair of TUN devices, one in each namespace;
// the emulator reads what one namespace routes into its device, impairs it
// with netem's meanings (delay and jitter from netem's distribution tables,
// random loss with netem's correlation, a serializing rate, a queue limit
// with tail drop, FIFO order unless reordering is asked for) and writes it
// into the other device. A link delayed one way only can instead be a veth
// pair whose delayed direction alone detours through the emulator (see
// Link.Veth and detour), so that its other direction pays no thread
// wake-up.
//
// Loss must be real per-packet loss so that TCP reacts to it. The devices
// use IFF_VNET_HDR with TCP segmentation offload: a super-packet the kernel
// hands over is split into MTU-sized packets before anything is decided, so
// one drop never removes a burst, and consecutive packets released together
// are coalesced again on write, which keeps the cost near a third of a core
// per Gbit/s.
//
// A packet's delay runs from when the kernel queued it on the TUN device,
// stamped by an eBPF filter on the device, not from when the emulator's
// reader woke up to read it, which on a virtual machine takes about as
// long as a whole veth hop (see arrivals). It ends when the packet enters
// the receiving namespace's stack, as a netem qdisc's packet enters the
// device at its time: the writer hands each packet to the device ahead of
// its release by what its write takes to get there, learnt from the
// kernel's stamps (see departures and writeLead).
package emulator

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/strait-net/strait/lab/emulation"
)

// Endpoint is one end of a link: a TUN device in a network namespace.
type Endpoint struct {
	Netns  string // name as `ip netns` shows it (a file under /var/run/netns); "" = the caller's namespace
	Device string // interface name to create, ≤ 15 bytes
}

// Link is one emulated point-to-point L3 link.
type Link struct {
	Name       string
	A, B       Endpoint
	AtoB, BtoA emulation.Params
	MTU        int // of both devices; 0 means Config.MTU
	// Veth says that A and B are the ends of a veth pair that exists
	// already, rather than TUN devices to create, and that exactly one
	// direction is delayed (delay or jitter): the emulator carries that
	// direction alone, detoured through a TAP device (see detour), and
	// the kernel the other, without a thread in its way. The caller
	// impairs the undelayed direction, if at all, in the kernel
	// (AttachLoss, tbf).
	Veth bool
}

// delayed is the direction of a Veth link the emulator carries: 0 for
// a-to-b, 1 for b-to-a.
func (l Link) delayed() int {
	if l.AtoB.Undelayed() {
		return 1
	}
	return 0
}

// Config describes every link one emulator process carries.
type Config struct {
	Links     []Link
	MTU       int    // 0 means 1500
	Seed      uint64 // 0 means random; the seed used is logged so runs can be repeated
	ReadyFile string // if set, written once every device exists
	Logger    *slog.Logger
}

// DefaultMTU is the MTU of the devices when Config.MTU is 0.
const DefaultMTU = 1500

func (c Config) mtu() int {
	if c.MTU == 0 {
		return DefaultMTU
	}
	return c.MTU
}

// linkMTU is l's MTU: its own, else the configuration's.
func (c Config) linkMTU(l Link) int {
	if l.MTU != 0 {
		return l.MTU
	}
	return c.mtu()
}

// Validate reports the first problem, naming the field.
func (c Config) Validate() error {
	if len(c.Links) == 0 {
		return errors.New("links: need at least one link")
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65000) {
		return fmt.Errorf("mtu %d: must be between 576 and 65000 (0 means %d)", c.MTU, DefaultMTU)
	}
	names := map[string]bool{}
	devices := map[Endpoint]string{}
	for i, l := range c.Links {
		field := fmt.Sprintf("links[%d]", i)
		if l.MTU != 0 && (l.MTU < 576 || l.MTU > 65000) {
			return fmt.Errorf("%s.mtu %d: must be between 576 and 65000 (0 means the configuration's mtu)", field, l.MTU)
		}
		if l.Name == "" {
			return fmt.Errorf("%s.name: must not be empty", field)
		}
		if names[l.Name] {
			return fmt.Errorf("%s.name %q: used twice", field, l.Name)
		}
		names[l.Name] = true
		for _, e := range []struct {
			side string
			ep   Endpoint
		}{{"a", l.A}, {"b", l.B}} {
			if err := validateNetns(e.ep.Netns); err != nil {
				return fmt.Errorf("%s.%s.netns: %w", field, e.side, err)
			}
			if err := validateDevice(e.ep.Device); err != nil {
				return fmt.Errorf("%s.%s.device: %w", field, e.side, err)
			}
			if other, ok := devices[e.ep]; ok {
				return fmt.Errorf("%s.%s.device %q: already used by %s in the same namespace", field, e.side, e.ep.Device, other)
			}
			devices[e.ep] = field + "." + e.side
		}
		if err := l.AtoB.Validate(); err != nil {
			return fmt.Errorf("%s.a-to-b: %w", field, err)
		}
		if err := l.BtoA.Validate(); err != nil {
			return fmt.Errorf("%s.b-to-a: %w", field, err)
		}
		if l.Veth && l.AtoB.Undelayed() == l.BtoA.Undelayed() {
			return fmt.Errorf("%s.veth: a veth link must be delayed one way only (a-to-b %v, b-to-a %v); a TUN link carries the others", field, l.AtoB, l.BtoA)
		}
	}
	return nil
}

func validateNetns(name string) error {
	if name == "" {
		return nil
	}
	if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: must be a name under /var/run/netns", name)
	}
	return nil
}

// validateDevice follows the kernel's dev_valid_name.
func validateDevice(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 15:
		return fmt.Errorf("%q: must be at most 15 bytes", name)
	case name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\x00"):
		return fmt.Errorf("%q: must not be . or .. or contain '/', ':' or white space", name)
	}
	return nil
}
