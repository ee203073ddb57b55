// Package packet is strait's kernel data plane (the "packet" mode beside the
// TLS "stream" mode): eBPF programs on a gateway node forward the packets of
// imports — TCP, UDP and the ICMP errors about them — to a gateway of the
// exporting cluster inside VXLAN, and that gateway translates them to the
// export's target, replies coming back the same way (docs/packet.md).
//
// The programs (bpf/packet.c, compiled by scripts/bpf.sh into the committed
// packet_bpf*.o) attach with tcx:
//
//   - lan_ingress on the interface toward the cluster: import packets get a
//     gateway from the Maglev table (the same table as package ring, kept in
//     a BPF array), are pinned in an LRU flow map and go into the VXLAN
//     device; replies of export targets go back into it, restored to the
//     client's own socket address.
//   - tun_ingress on a VXLAN device in collect_md mode: packets from
//     anything but a known peer gateway are dropped and counted; the rest
//     are checked against policy, DNATed to the export port's target and
//     SNATed to this gateway, or delivered to a local client.
//
// The kernel's VXLAN device does the framing, so GSO super-packets keep
// their offloads and oversize packets are fragmented outside (the underlay
// reassembles them); TCP SYNs get their MSS clamped so full-size segments
// fit without that.
//
// Maps and links are pinned under bpffs, one directory per gateway, so
// forwarding goes on while the gateway process restarts; Open adopts what
// is pinned, Teardown removes it all.
package packet

//go:generate ../scripts/bpf.sh
