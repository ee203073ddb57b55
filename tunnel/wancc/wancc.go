// Package wancc registers strait's TCP congestion control for the sockets
// of its WAN sessions, and of a gateway's LAN side with a smaller jitter
// allowance (Options): a BPF program (bpf/wancc.c, attached as the kernel's
// struct tcp_congestion_ops) that tells random loss from congestion. A loss
// while the connection's smoothed RTT is near its minimum costs the window
// an eighth, a loss behind a queue cubic's 30 %, and the window climbs back
// to where it was within a few round trips. docs/congestion.md says why and
// what it measured.
//
// The kernel knows the algorithm by the name given to Register for as long
// as the Algorithm is open; sockets that use it keep it until they close.
// Loading needs BPF struct_ops with links (Linux 6.4 or later, with BTF)
// and CAP_BPF, CAP_PERFMON (the program reads the kernel's TCP state) and
// CAP_NET_ADMIN; Register's error says what was missing.
package wancc

//go:generate ../../scripts/bpf.sh

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/strait-net/strait/internal/percpu"
)

// MaxNameLen is the longest name the kernel takes for a congestion control
// (TCP_CA_NAME_MAX less its terminating zero).
const MaxNameLen = 15

// Algorithm is the congestion control, registered with the kernel.
type Algorithm struct {
	name   string
	objs   wanccObjects
	link   link.Link
	closed bool
}

// Losses counts the losses the algorithm answered, one per recovery
// episode, by what it took each for.
type Losses struct {
	Random uint64 // no queue: the window lost an eighth
	Queue  uint64 // the smoothed RTT above the minimum by more than the jitter allowance: 30 %
}

// Options tune an Algorithm at registration.
type Options struct {
	// MinAllowance is the least jitter allowance: a loss counts as random
	// while the smoothed RTT is less than max(minimum/2, MinAllowance)
	// above the minimum. WANAllowance suits WAN paths; a LAN, whose
	// switches queue for microseconds, wants 0.
	MinAllowance time.Duration
}

// WANAllowance is Options.MinAllowance for WAN paths: the timer and
// scheduling noise on the way scatters RTT samples by a millisecond or two
// without any queue.
const WANAllowance = 2 * time.Millisecond

// Register loads the algorithm and registers it under name, which sockets
// then select with TCP_CONGESTION. It fails if the kernel already has an
// algorithm of that name.
func Register(name string, opts Options) (*Algorithm, error) {
	if err := CheckName(name); err != nil {
		return nil, fmt.Errorf("wancc: %w", err)
	}
	if opts.MinAllowance < 0 || opts.MinAllowance > time.Second {
		return nil, fmt.Errorf("wancc: MinAllowance %v: want 0 to 1s", opts.MinAllowance)
	}
	spec, err := loadWancc()
	if err != nil {
		return nil, err
	}
	if err := setName(spec.Maps[wanccMapWancc], name); err != nil {
		return nil, err
	}
	if err := spec.Variables[wanccVarMinAllowanceUs].Set(uint32(opts.MinAllowance.Microseconds())); err != nil {
		return nil, fmt.Errorf("wancc: set the allowance: %w", err)
	}
	a := &Algorithm{name: name}
	if err := spec.LoadAndAssign(&a.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("wancc: the kernel refused the program: %+v", verr)
		}
		return nil, fmt.Errorf("wancc: load (needs BPF struct_ops, BTF, CAP_BPF and CAP_PERFMON): %w", err)
	}
	a.link, err = link.AttachStructOps(link.StructOpsOptions{Map: a.objs.Wancc})
	if err != nil {
		a.objs.Close()
		return nil, fmt.Errorf("wancc: register %q (needs struct_ops links, Linux 6.4; fails if the name is taken): %w", name, err)
	}
	return a, nil
}

// CheckName applies the kernel's rule for BPF object names
// (bpf_obj_name_cpy), which the struct_ops registration enforces with a bare
// EINVAL; every congestion control the kernel ships fits it too.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("congestion control name %q: want 1 to %d bytes", name, MaxNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return fmt.Errorf("congestion control name %q: want letters, digits, '_' and '.' only", name)
		}
	}
	return nil
}

// setName writes name into the struct_ops map's name member, which the
// kernel reads when it registers the algorithm.
func setName(m *ebpf.MapSpec, name string) error {
	st, ok := m.Value.(*btf.Struct)
	if !ok || len(m.Contents) != 1 {
		return fmt.Errorf("wancc: struct_ops map %s has an unexpected shape", m.Name)
	}
	data, ok := m.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("wancc: struct_ops map %s holds %T", m.Name, m.Contents[0].Value)
	}
	for _, mb := range st.Members {
		if mb.Name != "name" {
			continue
		}
		off := int(mb.Offset.Bytes())
		field := data[off : off+MaxNameLen+1]
		clear(field)
		copy(field, name)
		return nil
	}
	return fmt.Errorf("wancc: struct_ops map %s has no name member", m.Name)
}

// Name is the name the kernel knows the algorithm by.
func (a *Algorithm) Name() string { return a.name }

// Losses sums the per-CPU loss counters.
func (a *Algorithm) Losses() (Losses, error) {
	var l Losses
	for i, dst := range []*uint64{&l.Random, &l.Queue} {
		var err error
		if *dst, err = percpu.Sum(a.objs.Losses, uint32(i)); err != nil {
			return Losses{}, fmt.Errorf("wancc: losses: %w", err)
		}
	}
	return l, nil
}

// Close unregisters the algorithm: no new socket can select it, and the
// sockets using it keep it until they close.
func (a *Algorithm) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	return errors.Join(a.link.Close(), a.objs.Close())
}
