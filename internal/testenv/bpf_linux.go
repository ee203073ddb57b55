package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread switched into the network namespace ns
// (an `ip netns` name) and switches the thread back before unlocking it.
// A thread left in the namespace would make the test process one of the
// namespace's processes, which RemoveNetns kills.
func InNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: the runtime ends the thread with the goroutine.
			errc <- fmt.Errorf("back to the test's network namespace: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// BPFAttached describes, one line each, the BPF programs attached to the
// devices of the network namespace ns: through tcx (ingress and egress),
// XDP, and cls_bpf filters (docs/packet.md, "Why tc (tcx) and a kernel
// VXLAN device, not XDP", weighs these hooks), each with the link that holds it, and the
// maps every such program uses, by name. A program, link or map a tool
// leaves attached shows here; the IDs come from the kernel's ID space, so
// a leftover also differs from what the same setup attaches later.
//
// The kernel's BPF objects are host-wide, and other tests on the host load
// their own: only what hangs off ns's devices is listed, so that the
// description is the namespace's alone.
func BPFAttached(ns string) (string, error) {
	var lines []string
	err := InNetns(ns, func() error {
		ifcs, err := net.Interfaces()
		if err != nil {
			return fmt.Errorf("devices of %s: %w", ns, err)
		}
		for _, ifc := range ifcs {
			for _, at := range []struct {
				name string
				t    ebpf.AttachType
			}{{"tcx_ingress", ebpf.AttachTCXIngress}, {"tcx_egress", ebpf.AttachTCXEgress}} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: at.t})
				if errors.Is(err, ebpf.ErrNotSupported) {
					continue // a kernel without tcx attaches nothing through it
				}
				if err != nil {
					return fmt.Errorf("query %s programs on %s in %s: %w", at.name, ifc.Name, ns, err)
				}
				for _, p := range res.Programs {
					lid, _ := p.LinkID()
					lines = append(lines, fmt.Sprintf("%s %s: %s link %d", ifc.Name, at.name, describeProgram(p.ID), lid))
				}
			}
			nl, err := netlink.LinkByIndex(ifc.Index)
			if err != nil {
				return fmt.Errorf("device %s in %s: %w", ifc.Name, ns, err)
			}
			if x := nl.Attrs().Xdp; x != nil && x.ProgId != 0 {
				lines = append(lines, fmt.Sprintf("%s xdp: %s", ifc.Name, describeProgram(ebpf.ProgramID(x.ProgId))))
			}
			for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
				filters, err := netlink.FilterList(nl, parent)
				if err != nil {
					continue // no clsact qdisc: no filter either
				}
				for _, f := range filters {
					if b, ok := f.(*netlink.BpfFilter); ok {
						lines = append(lines, fmt.Sprintf("%s cls_bpf %x: %s", ifc.Name, parent, describeProgram(ebpf.ProgramID(b.Id))))
					}
				}
			}
		}
		return nil
	})
	slices.Sort(lines)
	return strings.Join(lines, "\n"), err
}

// describeProgram names the program id and its maps; a program that went
// away meanwhile is said to have.
func describeProgram(id ebpf.ProgramID) string {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return fmt.Sprintf("program %d (%v)", id, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return fmt.Sprintf("program %d (%v)", id, err)
	}
	var maps []string
	ids, _ := info.MapIDs()
	for _, mid := range ids {
		name := fmt.Sprint(mid)
		if m, err := ebpf.NewMapFromID(mid); err == nil {
			if mi, err := m.Info(); err == nil {
				name = fmt.Sprintf("%s(%d)", mi.Name, mid)
			}
			m.Close()
		}
		maps = append(maps, name)
	}
	return fmt.Sprintf("program %s(%d) maps [%s]", info.Name, id, strings.Join(maps, " "))
}

// BPFPins lists every bpffs mounted at or below root, with every file
// pinned in it: the pins a test's tools made under its own directories,
// not the host's /sys/fs/bpf, which other processes use.
func BPFPins(root string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	root = filepath.Clean(root)
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo(5): ID parent major:minor root mountpoint options ...
		// - fstype source superoptions.
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "bpf" {
			continue
		}
		mnt := fields[4]
		if mnt != root && !strings.HasPrefix(mnt, root+"/") {
			continue
		}
		lines = append(lines, "bpffs "+mnt)
		err := filepath.WalkDir(mnt, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			// bpffs's own files, present in every instance, are no pins.
			if path != mnt && d.Name() != "maps.debug" && d.Name() != "progs.debug" {
				lines = append(lines, "  pin "+strings.TrimPrefix(path, mnt+"/"))
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("pins in %s: %w", mnt, err)
		}
	}
	return strings.Join(lines, "\n"), sc.Err()
}

// BPFFileDescriptors counts the BPF objects the test process itself holds
// open, by kind (bpf-prog, bpf-map, bpf_link): a helper that opens one and
// never closes it keeps the object alive after every pin and link is gone.
func BPFFileDescriptors() (string, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if kind, ok := strings.CutPrefix(target, "anon_inode:"); ok && strings.HasPrefix(kind, "bpf") {
			count[kind]++
		}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%s %d", k, count[k]))
	}
	return strings.Join(out, " "), nil
}
