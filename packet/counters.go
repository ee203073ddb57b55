package packet

import (
	"fmt"

	"github.com/strait-net/strait/internal/percpu"
)

// CounterNames names the per-CPU counters of bpf/packet.c, in the order of
// its enum. The gateway exports them by suffix (docs/packet.md, "The
// gateway"): NAME_packets as strait_packet_packets_total{direction="NAME"},
// NAME_drops as strait_packet_drops_total{reason="NAME"}, the rest as
// strait_packet_events_total{event="NAME"}.
var CounterNames = []string{
	"import_tx_packets",       // import packets sent into the tunnel
	"import_flows",            // import flows placed by the Maglev table
	"import_repinned_flows",   // pinned flows moved off a dead gateway
	"import_no_gateway_drops", // import packets with no live gateway
	"egress_policy_drops",     // new import flows denied by egress policy
	"export_rx_packets",       // tunnel packets translated to a target
	"export_flows",            // export flows given a NAT entry
	"ingress_policy_drops",    // new export flows denied by ingress policy
	"nat_exhausted_drops",     // new export flows with no free SNAT port
	"reply_tx_packets",        // target replies sent back into the tunnel
	"reply_rx_packets",        // replies delivered to local clients
	"icmp_error_tx_packets",   // ICMP errors about export flows sent back
	"non_peer_drops",          // tunnel packets from addresses that are no peer
	"malformed_drops",         // truncated or malformed tunnel packets
	"fragments",               // IPv4 fragments not translated (no first fragment tracked)
	"ip_options",              // packets with IP options (not translated)
	"unknown_service_drops",   // tunnel packets for no export and no import
	"mss_clamped",             // SYNs whose MSS was lowered
	"fib_pass",                // translated packets left to kernel routing
}

// FragmentCounterNames names the per-CPU counters of fragmented datagrams
// (enum frag_counter of bpf/packet.c, in its order), kept in a map of their
// own so that pins of versions before them are still adopted. They are
// exported like CounterNames.
var FragmentCounterNames = []string{
	"fragmented_datagrams", // first fragments translated, their datagram tracked
	"fragments_followed",   // later fragments sent the way of their first
}

// MTUCounterNames names the per-CPU counters of packets too big for the
// device they would leave by (enum mtu_counter of bpf/packet.c, in its
// order; docs/packet.md, "MTU"), in a map of their own like
// FragmentCounterNames, and exported like CounterNames.
var MTUCounterNames = []string{
	"too_big_drops", // dropped, answered with ICMP "fragmentation needed"
}

// Counters sums the per-CPU counters by name: CounterNames,
// FragmentCounterNames and MTUCounterNames.
func (d *Datapath) Counters() (map[string]uint64, error) {
	out := make(map[string]uint64, len(CounterNames)+len(FragmentCounterNames)+len(MTUCounterNames))
	for _, set := range []struct {
		m     string
		names []string
	}{{"counters", CounterNames}, {"frag_counters", FragmentCounterNames}, {"mtu_counters", MTUCounterNames}} {
		m := d.coll.Maps[set.m]
		if int(m.MaxEntries()) != len(set.names) {
			return nil, fmt.Errorf("%s map has %d entries, this version names %d", set.m, m.MaxEntries(), len(set.names))
		}
		for i, name := range set.names {
			sum, err := percpu.Sum(m, uint32(i))
			if err != nil {
				return nil, fmt.Errorf("counter %s: %w", name, err)
			}
			out[name] = sum
		}
	}
	return out, nil
}

// RuleDrops returns the packets dropped per compiled policy rule (index 0:
// the default deny), summed over CPUs, for the first n rules.
func (d *Datapath) RuleDrops(n int) ([]uint64, error) {
	m := d.coll.Maps["rule_drops"]
	if n > int(m.MaxEntries()) {
		n = int(m.MaxEntries())
	}
	out := make([]uint64, n)
	for i := range out {
		var err error
		if out[i], err = percpu.Sum(m, uint32(i)); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return out, nil
}
