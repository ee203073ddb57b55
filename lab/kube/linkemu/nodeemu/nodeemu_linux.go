package nodeemu

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/strait-net/strait/lab/emulation"
)

// probeNetem reports whether the kernel takes a netem qdisc, on a veth pair
// of its own (this lab's host has no dummy links).
func probeNetem(prefix string, log *slog.Logger) bool {
	name := prefix + "pa"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: prefix + "pb"}); err != nil {
		log.Warn("netem probe", "err", err)
		return false
	}
	defer deleteLink(name)
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false
	}
	q := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Parent: netlink.HANDLE_ROOT, Handle: netlink.MakeHandle(1, 0)},
		netlink.NetemQdiscAttrs{Latency: 1000})
	err = netlink.QdiscAdd(q)
	log.Info("netem probe", "available", err == nil, "err", err)
	return err == nil
}

func (p *path) addVeth(params emulation.Params) error {
	mtu := p.iface.Attrs().MTU
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.a, MTU: mtu, TxQLen: 1000}, PeerName: p.b}); err != nil {
		return fmt.Errorf("create veth %s: %w", p.a, err)
	}
	a, err := netlink.LinkByName(p.a)
	if err != nil {
		return err
	}
	attrs := netlink.QdiscAttrs{LinkIndex: a.Attrs().Index, Parent: netlink.HANDLE_ROOT, Handle: netlink.MakeHandle(1, 0)}
	var q netlink.Qdisc
	if p.backend == TBF {
		// The namespace lab's bucket and queue (emulation.TBFArgsMTU).
		// tc's rates are in bytes per second, and tbf's bucket in
		// scheduler ticks of line time (tc converts "burst" alike).
		burst := uint32(max(params.TBFBurst(), 10*(mtu+14)))
		q = &netlink.Tbf{QdiscAttrs: attrs, Rate: params.Rate / 8, Buffer: netlink.Xmittime(params.Rate/8, burst), Limit: uint32(params.TBFLimit())}
	} else {
		q = netlink.NewNetem(attrs, netemAttrs(params))
	}
	if err := netlink.QdiscAdd(q); err != nil {
		return fmt.Errorf("add %s qdisc on %s: %w", p.backend, p.a, err)
	}
	return nil
}

// checkCaps fails clearly where the container lacks the capabilities the
// emulation needs (a pod that is not privileged), instead of at the first
// netlink or bpf call.
func checkCaps() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil // not Linux-like; the calls themselves will say
	}
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		var caps uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(hex), "%x", &caps); err != nil {
			return nil
		}
		const netAdmin, sysAdmin, bpf = 12, 21, 39
		var missing []string
		if caps&(1<<netAdmin) == 0 {
			missing = append(missing, "CAP_NET_ADMIN")
		}
		if caps&(1<<sysAdmin) == 0 && caps&(1<<bpf) == 0 {
			missing = append(missing, "CAP_BPF (or CAP_SYS_ADMIN)")
		}
		if len(missing) > 0 {
			return fmt.Errorf("no privileges for link emulation: the process lacks %s (CapEff %s); it needs a privileged pod", strings.Join(missing, " and "), strings.TrimSpace(hex))
		}
	}
	return nil
}
