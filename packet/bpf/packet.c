// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// strait's packet data plane: tc (tcx) programs on a gateway node.
//
// lan_ingress runs on the gateway node's interface toward its cluster:
//   - a packet to an import's clusterset IP:port is sent to a gateway of the
//     exporting cluster, chosen by the Maglev table and pinned in the flow
//     map, through the VXLAN device (the kernel frames, segments and, when
//     the packet does not fit the underlay, fragments the outer packet);
//   - a reply of an export's target to this gateway's SNAT address is
//     restored to the client's socket address and sent back to the importing
//     gateway, and so are ICMP errors about such flows;
//   - a health probe to this node on the probe port is sent back, so that
//     what spreads the cluster's clients over its gateways judges the node
//     by these programs, not by its gateway process.
// tun_ingress runs on the VXLAN device (collect_md): it drops what did not
// come from a known peer gateway, then either DNATs/SNATs a packet for an
// export toward its target, or delivers a reply to a local client; a peer
// gateway's liveness probe is sent back to it, and the answer to this
// node's own probe goes to the prober's socket.
// A fragmented datagram's first fragment takes the path an unfragmented
// packet would; its later fragments, which hold no ports, follow it by the
// frags map.
//
// Struct layouts here are mirrored by package packet's Go encoders
// (maps.go); change both together.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// <linux/icmp.h> pulls in glibc headers that do not build for -target bpf.
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4 // code of ICMP_DEST_UNREACH
#define ICMP_TIME_EXCEEDED 11

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_IMPORTS 4096
#define MAX_EXPORTS 4096
#define MAX_PEERS 1024
#define MAX_TABLES 64
#define MAX_POLICY 16384
#define MAX_RULES 1024
#define NAT_TRIES 8

// Byte offsets in a packet carrying IPv4 without options, after l2 bytes of
// link-layer header: ETH_HLEN on Ethernet devices, 0 on layer-3 devices
// (TUN, as the lab's link emulator uses). Every function that uses them
// takes l2 as a parameter; the programs pass a constant, so every offset is
// one the verifier can check. Packets with IP options are not translated.
#define IP_OFF (l2)
#define L4_OFF (l2 + sizeof(struct iphdr))
#define IP_CSUM_OFF (IP_OFF + offsetof(struct iphdr, check))
#define IP_SRC_OFF (IP_OFF + offsetof(struct iphdr, saddr))
#define IP_DST_OFF (IP_OFF + offsetof(struct iphdr, daddr))
#define TCP_CSUM_OFF (L4_OFF + offsetof(struct tcphdr, check))
#define UDP_CSUM_OFF (L4_OFF + offsetof(struct udphdr, check))
#define ICMP_CSUM_OFF (L4_OFF + offsetof(struct icmphdr, checksum))
#define L4_SPORT_OFF L4_OFF
#define L4_DPORT_OFF (L4_OFF + 2)
// The quoted packet inside an ICMP error.
#define IN_IP_OFF (L4_OFF + sizeof(struct icmphdr))
#define IN_L4_OFF (IN_IP_OFF + sizeof(struct iphdr))

// Counters, indices into the per-CPU counters map. Package packet's
// CounterNames are these names in lower case without C_, in this order
// (TestCounterNames reads the enum from BTF).
enum counter {
	C_IMPORT_TX_PACKETS,     // packets of import flows sent into the tunnel
	C_IMPORT_FLOWS,  // import flows placed by the Maglev table
	C_IMPORT_REPINNED_FLOWS,  // pinned flows moved because their gateway died
	C_IMPORT_NO_GATEWAY_DROPS,  // import packets dropped: no live gateway
	C_EGRESS_POLICY_DROPS,   // new import flows dropped by egress policy
	C_EXPORT_RX_PACKETS,     // tunnel packets translated to an export's target
	C_EXPORT_FLOWS,  // export flows given a NAT entry
	C_INGRESS_POLICY_DROPS,  // new export flows dropped by ingress policy
	C_NAT_EXHAUSTED_DROPS, // new export flows dropped: no free SNAT port
	C_REPLY_TX_PACKETS,      // target replies sent back into the tunnel
	C_REPLY_RX_PACKETS,      // replies delivered from the tunnel to clients
	C_ICMP_ERROR_TX_PACKETS,       // ICMP errors about export flows sent back
	C_NON_PEER_DROPS,      // tunnel packets from addresses that are no peer
	C_MALFORMED_DROPS,     // truncated or malformed packets dropped
	C_FRAGMENTS,      // IPv4 fragments not translated (enum frag_counter: those that were)
	C_IP_OPTIONS,    // packets of translated flows with IP options dropped
	C_UNKNOWN_SERVICE_DROPS,       // tunnel packets for no export and no import
	C_MSS_CLAMPED,   // SYNs whose MSS option was lowered
	C_FIB_PASS,      // translated packets left to the kernel's routing
	C_COUNTERS,
};

struct svc_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct import_val {
	__u32 id;    // service ID in policy keys
	__u32 table; // index into tables
};

struct table_info {
	__u64 seed; // ring's mixed key seed
	__u32 size; // buckets, 0 = no table
	__u32 base; // first bucket's index in maglev
};

struct flow_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct flow_val {
	__be32 gw;
	// The FIB's answer for the client, looked up when the flow was
	// pinned: replies are delivered without bpf_fib_lookup. 0: none, the
	// reply path looks the route up itself.
	__u32 ifindex;
	__be32 nh; // the next hop toward the client
	// The peers epoch at which gw was last found alive (0: never): while
	// peer_epoch holds this value, the peers map has not been written
	// since, and the flow's packets skip the peers lookup.
	__u32 alive_epoch;
};

#define PEER_ALIVE 1
// The high half of a peer's flags: the MSS its SYNs are clamped to, sized
// for the route to that gateway (docs/packet.md, "MTU"); 0: config's mss.
#define PEER_MSS_SHIFT 16

struct peer_val {
	__u32 cluster; // cluster ID in policy keys (0 is this cluster)
	__u32 flags;   // PEER_ALIVE, and the MSS << PEER_MSS_SHIFT
};

struct export_val {
	__be32 addr; // the target
	__be16 port;
	__u16 pad;
	__u32 id; // service ID in policy keys
};

// An LPM key: the first 64 bits (cluster, service) are always matched in
// full, then prefixlen-64 bits of the client address.
struct policy_key {
	__u32 prefixlen;
	__u32 cluster;
	__u32 service;
	__be32 addr;
};

struct policy_val {
	__u32 allow;
	__u32 rule; // index into rule_drops, 0 = default deny
};

struct nat_key {
	__be32 peer;
	__be32 caddr;
	__be32 vaddr;
	__be16 cport;
	__be16 vport;
	__u8 proto;
	__u8 pad[3];
};

struct nat_val {
	__be32 taddr;
	__be16 tport;
	__be16 sport; // the SNAT port
	__u64 seen;   // now() at the last packet from the client
	// The FIB's answer for the target, looked up when the entry was made:
	// established flows skip bpf_fib_lookup (and the route lookup
	// bpf_redirect_neigh makes without a next hop). 0: the FIB had no
	// complete answer, the kernel's forwarding takes each packet.
	__u32 ifindex;
	__be32 nh; // the next hop (the target itself on its own subnet)
};

struct rnat_val {
	struct nat_key flow;
	__u32 pad;
	__u64 seen; // now() at the last packet from the target
};

struct rnat_key {
	__be32 taddr;
	__be16 tport;
	__be16 sport;
	__u8 proto;
	__u8 pad[3];
};

struct config {
	__u32 tun_ifindex; // the VXLAN (collect_md) device
	__u32 vni;
	__be32 snat_addr; // this gateway's address toward export targets
	__u16 mss;        // TCP MSS clamp, 0 = none
	__u16 port_min;   // SNAT port range, host order
	__u16 port_max;
	__u16 probe_port; // liveness probes' port, host order; 0 = none answered
	// 1 while the gateway process finds its node cut off from every peer
	// gateway, else 0 (the only values it writes, and the only ones its
	// reader accepts): the LAN's health probes are left to the stack,
	// which refuses them (docs/failover.md, "A gateway cut off from its
	// peers").
	__u32 lan_quiet;
	__u64 idle_ns; // a NAT entry idle this long in both directions may be reused
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IMPORTS);
	__type(key, struct svc_key);
	__type(value, struct import_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} imports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TABLES);
	__type(key, __u32);
	__type(value, struct table_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tables SEC(".maps");

// Bucket → gateway address (0: no live gateway). Go sizes it at load time.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __be32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PEERS);
	__type(key, __be32);
	__type(value, struct peer_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} peers SEC(".maps");

// The epoch of the peers and exports maps (docs/packet.md, "Per-packet
// work"): package packet advances it after every write of either map, and
// when it loads the programs, never 0. What a program read from peers or
// exports at the current epoch is still what the map says, so an
// established flow checks its peer against a copy it already holds (its
// flow entry's alive_epoch, this CPU's peer_cache) and a tunnel packet
// finds its export in this CPU's export_cache, instead of a hash lookup
// per packet. 0 (maps of a version before it, not yet written): every
// packet looks both up. A map of its own, like frag_counters, so pins of
// earlier versions are still adopted; its name is older than the exports'
// use of it, and kept so that pins are.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} peer_epoch SEC(".maps");

#define PEER_CACHE_SLOTS 4 // a power of two

// A peers entry as this CPU last read it, and the epoch it was read at.
struct peer_slot {
	__be32 addr;
	__u32 epoch; // 0: empty
	struct peer_val val;
};

struct peer_cache {
	struct peer_slot slot[PEER_CACHE_SLOTS];
};

// The tunnel packets' peer check, per CPU: a few recently seen peers
// (tun_ingress), one cache line, slots picked by the address's low bits.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct peer_cache);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} peer_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EXPORTS);
	__type(key, struct svc_key);
	__type(value, struct export_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} exports SEC(".maps");

#define EXPORT_CACHE_SLOTS 8 // a power of two

// An exports lookup as this CPU last made it, and the epoch it was made
// at: found or not, for the importing gateway's replies miss exports.
struct export_slot {
	struct svc_key key;
	__u32 epoch; // 0: empty
	__u32 found;
	struct export_val val;
};

struct export_cache {
	struct export_slot slot[EXPORT_CACHE_SLOTS];
};

// tun_ingress's exports lookups, per CPU. Not pinned: a cache, valid only
// at the epoch it was filled at, which Load advances.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct export_cache);
} export_cache SEC(".maps");

#define MTU_CACHE_SLOTS 4 // a power of two

// A device's MTU as this CPU last read it (bpf_check_mtu), and the jiffy
// it read it in.
struct mtu_slot {
	__u32 ifindex; // 0: empty
	__u32 mtu;
	__u64 jiffies;
};

struct mtu_cache {
	struct mtu_slot slot[MTU_CACHE_SLOTS];
};

// The MTU check's device MTUs, per CPU (too_big). Not pinned: a cache,
// refilled within a tick.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mtu_cache);
} mtu_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_POLICY);
	__type(key, struct policy_key);
	__type(value, struct policy_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat_key);
	__type(value, struct nat_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rnat_key);
	__type(value, struct rnat_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

// Drops per policy rule (index 0: the default deny).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rule_drops SEC(".maps");

// Fragmented datagrams (docs/packet.md, "Fragments"). Their counters are a
// map of their own: a larger counters map would not match the pins of
// earlier versions, and a gateway would refuse to adopt them. Package
// packet's FragmentCounterNames are these names in lower case without F_.
enum frag_counter {
	F_FRAGMENTED_DATAGRAMS,  // first fragments translated, their datagram tracked
	F_FRAGMENTS_FOLLOWED,    // later fragments sent the way of their first
	F_COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, F_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_counters SEC(".maps");

// Packets too big for the device they would leave by (docs/packet.md,
// "MTU"). A map of its own for the reason frag_counters has one. Package
// packet's MTUCounterNames are these names in lower case without M_.
enum mtu_counter {
	M_TOO_BIG_DROPS, // dropped, answered with ICMP "fragmentation needed"
	M_COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, M_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mtu_counters SEC(".maps");

// A fragmented datagram as a hook sees it: only its first fragment holds
// the ports, so the others are matched by the IPv4 reassembly key. peer is
// the tunnel packet's outer source on the VXLAN device (never 0: peers are
// addresses) and 0 on the LAN device, so the two hooks' entries differ.
struct frag_key {
	__be32 peer;
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};

enum { FRAG_DROP, FRAG_TUNNEL, FRAG_NEXT_HOP, FRAG_ROUTE, FRAG_KERNEL };

// What was done to the first fragment, for the others: the addresses and ID
// it left with, and where it went.
struct frag_val {
	__be32 gw; // FRAG_TUNNEL: the peer gateway
	__be32 saddr;
	__be32 daddr;
	__u32 ifindex; // FRAG_NEXT_HOP: the interface and next hop
	__be32 nh;
	__be16 id;
	__u16 how; // FRAG_*
};

// Entries are not deleted: a datagram's fragments pass within microseconds
// of each other, and the oldest entries make room.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frag_key);
	__type(value, struct frag_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frags SEC(".maps");

// The IPv4 IDs the exporting gateway gives datagrams it SNATs: per CPU, so
// that no two CPUs hand out the same one.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_ids SEC(".maps");

static __always_inline void count_frag(enum frag_counter c)
{
	__u32 i = c;
	__u64 *v = bpf_map_lookup_elem(&frag_counters, &i);
	if (v)
		*v += 1;
}

static __always_inline void count_mtu(enum mtu_counter c)
{
	__u32 i = c;
	__u64 *v = bpf_map_lookup_elem(&mtu_counters, &i);
	if (v)
		*v += 1;
}

static __always_inline void count(enum counter c)
{
	__u32 i = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		*v += 1;
}

static __always_inline struct config *get_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&config, &zero);
}

// peers_epoch is peer_epoch's value (0: none).
static __always_inline __u32 peers_epoch(void)
{
	__u32 zero = 0;
	__u32 *e = bpf_map_lookup_elem(&peer_epoch, &zero);
	return e ? *(volatile __u32 *)e : 0;
}

// lookup_peer reads the peers entry of addr into out, from this CPU's
// cache when it was read at the current epoch; 0 when addr is no peer.
// The epoch is read before the map: an entry read after a write of peers
// but before its epoch was advanced is stamped with the old epoch, and the
// next packet reads it again.
static __always_inline int lookup_peer(__be32 addr, struct peer_val *out)
{
	__u32 zero = 0;
	__u32 epoch = peers_epoch();
	struct peer_slot *s = 0;
	if (epoch) {
		struct peer_cache *c = bpf_map_lookup_elem(&peer_cache, &zero);
		if (c) {
			// The address is in network order: its last byte
			// varies most between a cluster's gateways.
			s = &c->slot[(bpf_ntohl(addr) ^ (bpf_ntohl(addr) >> 8)) & (PEER_CACHE_SLOTS - 1)];
			if (s->epoch == epoch && s->addr == addr) {
				*out = s->val;
				return 1;
			}
		}
	}
	struct peer_val *pv = bpf_map_lookup_elem(&peers, &addr);
	if (!pv)
		return 0;
	*out = *pv;
	if (s) {
		// Emptied first: a half-written slot never matches.
		s->epoch = 0;
		__asm__ __volatile__("" ::: "memory"); // stores stay in order
		s->addr = addr;
		s->val = *out;
		__asm__ __volatile__("" ::: "memory");
		s->epoch = epoch;
	}
	return 1;
}

// lookup_export reads the exports entry of k into out, from this CPU's
// cache when it was looked up at the current epoch; 0 when k is no export.
// As in lookup_peer, the epoch is read before the map, and a slot is
// emptied before it is rewritten.
static __always_inline int lookup_export(struct svc_key *k, struct export_val *out)
{
	__u32 zero = 0;
	__u32 epoch = peers_epoch();
	struct export_slot *s = 0;
	if (epoch) {
		struct export_cache *c = bpf_map_lookup_elem(&export_cache, &zero);
		if (c) {
			__u32 h = bpf_ntohl(k->addr) ^ bpf_ntohs(k->port) ^ k->proto;
			h ^= h >> 8;
			s = &c->slot[h & (EXPORT_CACHE_SLOTS - 1)];
			if (s->epoch == epoch && s->key.addr == k->addr && s->key.port == k->port && s->key.proto == k->proto) {
				if (!s->found)
					return 0;
				*out = s->val;
				return 1;
			}
		}
	}
	struct export_val *ev = bpf_map_lookup_elem(&exports, k);
	if (ev)
		*out = *ev;
	if (s) {
		s->epoch = 0;
		__asm__ __volatile__("" ::: "memory"); // stores stay in order
		s->key = *k;
		s->found = ev != 0;
		if (ev)
			s->val = *out;
		__asm__ __volatile__("" ::: "memory");
		s->epoch = epoch;
	}
	return ev != 0;
}

// The coarse clock as this CPU last read it, and the jiffy it read it in.
struct clock_slot {
	__u64 jiffies;
	__u64 ns;
};

// Not pinned: a cache, refilled within a tick.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct clock_slot);
} coarse_clock SEC(".maps");

// now is the clock of NAT entries' idle times. The coarse clock (a tick's
// resolution) is cheaper than bpf_ktime_get_ns and ample for idle times of
// minutes. It moves only at a tick, as jiffies do, so each CPU reads it
// once a jiffy and keeps it: bpf_jiffies64 is a load (the verifier
// inlines it), where the clock's helper was a tenth of tun_ingress's
// samples under iperf3 (docs/packet.md, "Per-packet cost"). A read that
// meets a tick between the jiffies' update and the clock's keeps the old
// time until the next jiffy: a tick off, in idle times of minutes.
static __always_inline __u64 now(void)
{
	__u32 zero = 0;
	struct clock_slot *c = bpf_map_lookup_elem(&coarse_clock, &zero);
	if (!c)
		return bpf_ktime_get_coarse_ns();
	__u64 j = bpf_jiffies64();
	if (c->jiffies != j || !c->ns) {
		c->ns = bpf_ktime_get_coarse_ns();
		c->jiffies = j;
	}
	return c->ns;
}

// touch records a packet in an entry's seen time. It writes only when the
// coarse clock has moved, at most once a tick: a write per packet would
// dirty the entry's cache line for every CPU that reads it.
static __always_inline void touch(__u64 *seen)
{
	__u64 t = now();
	if (*seen != t)
		*seen = t;
}

// ---- Maglev: the same arithmetic as package ring (hash.go, ring.go). ----

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define OFFSET_KEY 0xa0761d6478bd642fULL
#define SKIP_KEY 0xe7037ed1a0b428dbULL
#define FLOW_KEY0 0x589965cc75374cc3ULL
#define FLOW_KEY1 0x1d8e4e27c47d124fULL
#define FLOW_KEY2 0xc2b2ae3d27d4eb4fULL

// mulhi is the high word of the 128-bit product (bits.Mul64's hi); BPF has
// only 64-bit multiplication.
static __always_inline __u64 mulhi(__u64 a, __u64 b)
{
	__u64 al = (__u32)a, ah = a >> 32, bl = (__u32)b, bh = b >> 32;
	__u64 p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
	__u64 mid = (p0 >> 32) + (__u32)p1 + (__u32)p2;
	return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

static __always_inline __u64 mum(__u64 a, __u64 b)
{
	return mulhi(a, b) ^ (a * b);
}

static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

// v4word is the little-endian second word of the IPv4-mapped IPv6 form
// (::ffff:a.b.c.d), as ring.KeyOf reads it from As16.
static __always_inline __u64 v4word(__be32 addr)
{
	return ((__u64)__builtin_bswap32(bpf_ntohl(addr)) << 32) | 0xffff0000ULL;
}

// flow_hash is ring.KeyOf(proto, saddr:sport, daddr:dport).
static __always_inline __u64 flow_hash(__u8 proto, __be32 saddr, __be16 sport, __be32 daddr, __be16 dport)
{
	__u64 ports = (__u64)bpf_ntohs(sport) << 24 | (__u64)bpf_ntohs(dport) << 8 | proto;
	__u64 h = mum(FLOW_KEY0, v4word(saddr) ^ FLOW_KEY1);
	h = mum(h ^ FLOW_KEY2, v4word(daddr) ^ OFFSET_KEY);
	return mum(h ^ ports ^ SKIP_KEY, GOLDEN);
}

// ---- Packet editing. All writes go through helpers, so the checksums
// follow; packet pointers are stale after each and are not used again. ----

static __always_inline int set_addr(struct __sk_buff *skb, const __u32 l2, __u32 off, __be32 old, __be32 new, __u32 l4csum,
				    __u64 l4flags)
{
	if (old == new)
		return 0;
	if (l4csum && bpf_l4_csum_replace(skb, l4csum, old, new, l4flags | BPF_F_PSEUDO_HDR | sizeof(new)))
		return -1;
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old, new, sizeof(new)))
		return -1;
	return bpf_skb_store_bytes(skb, off, &new, sizeof(new), 0);
}

static __always_inline int l4_csum_off(const __u32 l2, __u8 proto, __u32 *off, __u64 *flags)
{
	if (proto == IPPROTO_TCP) {
		*off = TCP_CSUM_OFF;
		*flags = 0;
		return 0;
	}
	if (proto == IPPROTO_UDP) {
		*off = UDP_CSUM_OFF;
		// A zero UDP checksum means none: keep it so.
		*flags = BPF_F_MARK_MANGLED_0;
		return 0;
	}
	return -1;
}

// csum_add is one's-complement addition of 32-bit words, what
// bpf_csum_diff computes, without a helper call.
static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	a += b;
	return a + (a < b);
}

static __always_inline __u16 csum_fold(__u32 c)
{
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return (__u16)c;
}

// translate rewrites a TCP or UDP packet's addresses and ports. The L4
// checksum goes through bpf_l4_csum_replace, which alone knows whether the
// skb's checksum is partial (then only the pseudo-header part changes);
// one call for the addresses (pseudo-header) and one for the ports when they
// change. The IP header's checksum and the fields are written directly: one
// or two helper calls per packet where a call per field took twelve.
static __always_inline int translate(struct __sk_buff *skb, const __u32 l2, __u8 proto, __be32 osaddr, __be32 nsaddr,
				     __be16 osport, __be16 nsport, __be32 odaddr, __be32 ndaddr, __be16 odport,
				     __be16 ndport)
{
	__u32 csum;
	__u64 flags;
	if (l4_csum_off(l2, proto, &csum, &flags))
		return -1;
	__u32 ad = csum_add(csum_add(csum_add(~osaddr, ~odaddr), nsaddr), ndaddr);
	__u32 op = (__u32)osport | (__u32)odport << 16, np = (__u32)nsport | (__u32)ndport << 16;
	__u32 pd = csum_add(~op, np);
	if (bpf_l4_csum_replace(skb, csum, 0, ad, flags | BPF_F_PSEUDO_HDR))
		return -1;
	// Ports often stay (a target on the clusterset port, the client's own
	// port as SNAT port): then there is nothing to add.
	if (op != np && bpf_l4_csum_replace(skb, csum, 0, pd, flags))
		return -1;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + IP_OFF;
	__be16 *ports = data + L4_OFF;
	if ((void *)(ip + 1) > end || (void *)(ports + 2) > end)
		return -1;
	ip->check = ~csum_fold(csum_add((__u16)~ip->check, ad));
	ip->saddr = nsaddr;
	ip->daddr = ndaddr;
	ports[0] = nsport;
	ports[1] = ndport;
	return 0;
}

// clamp_mss lowers the MSS option of a SYN to or from the peer gateway
// peer, so that full-size segments still fit the underlay after the VXLAN
// headers: to the MSS of the peer's entry, sized for the route to it, else
// to mss (config's, sized for the narrowest route to any peer). A 9000-byte
// peer's flows are not held to a 1500-byte one's size. Only SYNs pay the
// peers lookup.
//
// A global function: the verifier checks it once, not once per caller.
__noinline int clamp_mss(struct __sk_buff *skb, __u32 mss, __be32 peer, __u32 l2)
{
	if (l2 > ETH_HLEN)
		return 0;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct tcphdr *th = data + L4_OFF;
	if ((void *)(th + 1) > end || !th->syn)
		return 0;
	struct peer_val *pv = bpf_map_lookup_elem(&peers, &peer);
	if (pv && pv->flags >> PEER_MSS_SHIFT)
		mss = pv->flags >> PEER_MSS_SHIFT;
	if (!mss)
		return 0;
	// The lookup is a call: the packet pointers are read again.
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	th = data + L4_OFF;
	if ((void *)(th + 1) > end)
		return 0;
	__u32 optlen = th->doff * 4;
	if (optlen <= sizeof(*th) || optlen > 60)
		return 0;
	optlen -= sizeof(*th);
	__u32 i = 0;
	// SYN options are a handful (MSS, SACK-permitted, timestamps, window
	// scale, NOPs): eight items cover what stacks send.
	for (int n = 0; n < 8; n++) {
		if (i >= optlen || i >= 40)
			return 0;
		__u8 *p = data + L4_OFF + sizeof(*th) + i;
		if ((void *)(p + 1) > end)
			return 0;
		__u8 kind = p[0];
		if (kind == 0)
			return 0;
		if (kind == 1) {
			i++;
			continue;
		}
		if ((void *)(p + 2) > end)
			return 0;
		__u8 len = p[1];
		if (len < 2)
			return 0;
		if (kind == 2 && len == 4) {
			if ((void *)(p + 4) > end)
				return 0;
			__be16 old;
			__builtin_memcpy(&old, p + 2, 2);
			if (bpf_ntohs(old) <= mss)
				return 0;
			__be16 new = bpf_htons(mss);
			__u32 off = L4_OFF + sizeof(*th) + i + 2;
			if (bpf_l4_csum_replace(skb, TCP_CSUM_OFF, old, new, sizeof(new)))
				return 0;
			if (bpf_skb_store_bytes(skb, off, &new, sizeof(new), 0))
				return 0;
			count(C_MSS_CLAMPED);
			return 0;
		}
		i += len;
	}
	return 0;
}

// The parsed headers of an IPv4 TCP/UDP/ICMP packet.
struct pkt {
	__be32 saddr, daddr;
	__be16 sport, dport;
	__u8 proto;
	__u8 icmp_type;
	__u8 first_frag; // P_OK: the first fragment of a TCP or UDP datagram
	__be16 id;       // the IPv4 ID, with first_frag and P_FRAGMENT
};

// P_FRAGMENT: a fragment that is not a TCP or UDP datagram's first (those
// are P_OK with first_frag set: they hold the ports).
enum { P_OK, P_PASS, P_MALFORMED, P_FRAGMENT, P_OPTIONS };

static __always_inline int parse(struct __sk_buff *skb, const __u32 l2, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (l2) {
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > end)
			return P_MALFORMED;
		if (eth->h_proto != bpf_htons(ETH_P_IP))
			return P_PASS;
	} else if (skb->protocol != bpf_htons(ETH_P_IP)) {
		return P_PASS;
	}
	struct iphdr *ip = data + l2;
	if ((void *)(ip + 1) > end)
		return P_MALFORMED;
	if (ip->version != 4 || ip->ihl < 5 || bpf_ntohs(ip->tot_len) < ip->ihl * 4)
		return P_MALFORMED;
	p->saddr = ip->saddr;
	p->daddr = ip->daddr;
	p->proto = ip->protocol;
	p->sport = p->dport = 0;
	p->icmp_type = 0;
	p->first_frag = 0;
	p->id = ip->id;
	if (ip->frag_off & bpf_htons(0x1fff)) // an offset: not the first
		return P_FRAGMENT;
	if (ip->frag_off & bpf_htons(0x2000)) { // more fragments follow
		if (ip->ihl != 5 || (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP))
			return P_FRAGMENT;
		p->first_frag = 1;
	}
	if (ip->ihl != 5)
		return P_OPTIONS;
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		__be16 *ports = (void *)(ip + 1);
		if ((void *)(ports + 2) > end)
			return P_MALFORMED;
		if (p->proto == IPPROTO_TCP && (void *)((struct tcphdr *)ports + 1) > end)
			return P_MALFORMED;
		p->sport = ports[0];
		p->dport = ports[1];
		return P_OK;
	}
	if (p->proto == IPPROTO_ICMP) {
		struct icmphdr *ic = (void *)(ip + 1);
		if ((void *)(ic + 1) > end)
			return P_MALFORMED;
		p->icmp_type = ic->type;
		return P_OK;
	}
	return P_PASS;
}

static __always_inline int policy_allows(__u32 cluster, __u32 service, __be32 addr)
{
	struct policy_key k = {.prefixlen = 96, .cluster = cluster, .service = service, .addr = addr};
	struct policy_val *v = bpf_map_lookup_elem(&policy, &k);
	if (v && v->allow)
		return 1;
	__u32 rule = v ? v->rule : 0;
	__u64 *n = bpf_map_lookup_elem(&rule_drops, &rule);
	if (n)
		*n += 1;
	return 0;
}

static __always_inline int to_tunnel(struct __sk_buff *skb, const __u32 l2, struct config *cfg, __be32 remote)
{
	if (!l2) {
		// From a layer-3 device: the VXLAN device carries Ethernet
		// frames. The receiving gateway's program reads only the type; a
		// fixed, locally administered source keeps the kernel's VXLAN
		// receive path from taking the frame for its own.
		struct ethhdr eth = {.h_source = {0x02, 0, 0, 0, 0, 0x01}, .h_proto = bpf_htons(ETH_P_IP)};
		if (bpf_skb_change_head(skb, ETH_HLEN, 0) || bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0))
			return TC_ACT_SHOT;
	}
	struct bpf_tunnel_key key = {};
	key.remote_ipv4 = bpf_ntohl(remote);
	key.tunnel_id = cfg->vni;
	key.tunnel_ttl = 64;
	// No outer UDP checksum, as the kernel's VXLAN devices default to
	// for IPv4; the inner packet keeps its own.
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), BPF_F_ZERO_CSUM_TX))
		return TC_ACT_SHOT;
	return bpf_redirect(cfg->tun_ifindex, 0);
}

// to_kernel leaves a translated packet to the kernel's own forwarding.
static __always_inline int to_kernel(struct __sk_buff *skb)
{
	count(C_FIB_PASS);
	// The inner frame's MAC was the sending node's next hop, not this
	// device: as "other host" the kernel would drop it.
	bpf_skb_change_type(skb, 0); // PACKET_HOST
	return TC_ACT_OK;
}

// to_next_hop sends a packet out of ifindex to the next hop nh; the kernel
// resolves nh's link-layer address (its neighbour table) after the program.
static __always_inline int to_next_hop(__u32 ifindex, __be32 nh)
{
	struct bpf_redir_neigh n = {.nh_family = 2, .ipv4_nh = nh}; // AF_INET
	return bpf_redirect_neigh(ifindex, &n, sizeof(n), 0);
}

// route asks the FIB for daddr's interface and next hop, as for a packet
// arriving on the tunnel device (the one device the gateway forwards from,
// and the FIB answers only for such); 0 when it has no complete answer.
static __always_inline __u32 route(struct __sk_buff *skb, struct config *cfg, __be32 saddr, __be32 daddr, __be32 *nh)
{
	struct bpf_fib_lookup fib = {};
	fib.family = 2; // AF_INET
	fib.ipv4_src = saddr;
	fib.ipv4_dst = daddr;
	fib.ifindex = cfg->tun_ifindex;
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	// Without tot_len the helper checks this packet against the found
	// device's MTU after filling in the route: an entry made by a packet
	// too big for it must still cache the route (the programs check sizes
	// themselves, too_big), or every later packet of the flow would go to
	// the kernel's forwarding.
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && fib.ifindex != cfg->tun_ifindex)
		rc = BPF_FIB_LKUP_RET_SUCCESS;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	// With SKIP_NEIGH, ipv4_dst holds the next hop: the gateway of the
	// route, or daddr itself on a directly connected subnet.
	*nh = fib.ipv4_dst;
	return fib.ifindex;
}

// to_local sends a translated packet toward daddr through the FIB; when the
// FIB has no complete answer the kernel's own forwarding takes it.
static __always_inline int to_local(struct __sk_buff *skb, struct config *cfg, __be32 saddr, __be32 daddr)
{
	__be32 nh;
	__u32 ifindex = route(skb, cfg, saddr, daddr, &nh);
	if (!ifindex)
		return to_kernel(skb);
	return to_next_hop(ifindex, nh);
}

// ---- MTU (docs/packet.md, "MTU"). A packet that crossed the tunnel may be
// larger than the device it leaves by: a client on a 9000-byte LAN sends
// 4000-byte datagrams over a 9000-byte underlay to a target on a 1500-byte
// LAN, or a target's reply meets a client's 1500-byte LAN. The programs'
// redirects are not held to the device's MTU on the way out, and a veth
// drops what its peer's MTU does not take, silently: the flow would be
// black-holed. A router answers such a packet with ICMP "fragmentation
// needed" and the device's MTU, and the sender lowers its path MTU; so do
// the programs. (A router would fragment a packet without DF instead; the
// programs cannot, and answer it the same way: Linux senders lower their
// path MTU for it too, and fragment themselves.) ----

// too_big returns the MTU of the device ifindex when the packet does not
// fit it, else 0. GSO packets are left alone (their segments are sized by
// the sender's MSS, which the clamp and the target's SYN bound), and so are
// packets of 576 bytes or less, which every IPv4 link is expected to carry:
// an acknowledgment pays no helper call.
static __always_inline __u32 too_big(struct __sk_buff *skb, const __u32 l2, __u32 ifindex)
{
	if (skb->gso_size)
		return 0;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + IP_OFF;
	if ((void *)(ip + 1) > end)
		return 0;
	__u32 len = bpf_ntohs(ip->tot_len);
	if (len <= 576)
		return 0;
	// The device's MTU as this CPU read it in this jiffy: the helper
	// finds the device by its index on every call, a tenth of
	// tun_ingress's samples exporting UDP (docs/packet.md, "Per-packet
	// cost"). A changed MTU is seen from the next jiffy on (4 ms at
	// HZ=250), as a route's is once its NAT or flow entry is remade.
	__u32 zero = 0;
	__u64 j = bpf_jiffies64();
	struct mtu_cache *c = bpf_map_lookup_elem(&mtu_cache, &zero);
	struct mtu_slot *s = 0;
	if (c) {
		s = &c->slot[(ifindex ^ (ifindex >> 2)) & (MTU_CACHE_SLOTS - 1)];
		if (s->ifindex == ifindex && s->jiffies == j && s->mtu)
			return len > s->mtu ? s->mtu : 0;
	}
	// Given the IP length, the helper compares it with the MTU alone (the
	// device's link-layer header is its own business) and returns the
	// device's MTU whatever the verdict.
	__u32 mtu = len;
	int rc = bpf_check_mtu(skb, ifindex, &mtu, 0, 0);
	if (rc < 0)
		return 0; // no such device: the redirect fails on its own
	if (s) {
		s->ifindex = ifindex;
		s->mtu = mtu;
		s->jiffies = j;
	}
	return rc == BPF_MTU_CHK_RET_FRAG_NEEDED ? mtu : 0;
}

// frag_needed turns a packet that came out of the tunnel and is too big for
// the device it would leave by into the ICMP error a router sends — from
// the packet's destination to its source, "fragmentation needed" with mtu,
// quoting its IP header and first 8 bytes — and sends it back through the
// tunnel to peer, untranslated: about a client's packet (client →
// clusterset IP:port) the importing gateway delivers it as any error about
// an import flow; about a target's reply (clusterset IP:port → client) the
// exporting gateway restores it for the target (icmp_to_target).
static __always_inline int frag_needed(struct __sk_buff *skb, const __u32 l2, struct config *cfg, __be32 peer,
				       __u32 mtu)
{
	struct {
		struct iphdr ip;
		struct icmphdr icmp;
		__u8 quote[28];
	} m = {};
	if (bpf_skb_load_bytes(skb, IP_OFF, m.quote, sizeof(m.quote)))
		return TC_ACT_SHOT;
	struct iphdr *q = (void *)m.quote;
	m.ip.version = 4;
	m.ip.ihl = 5;
	m.ip.tot_len = bpf_htons(sizeof(m));
	m.ip.ttl = 64;
	m.ip.protocol = IPPROTO_ICMP;
	m.ip.saddr = q->daddr;
	m.ip.daddr = q->saddr;
	m.ip.check = ~csum_fold(bpf_csum_diff(0, 0, (__be32 *)&m.ip, sizeof(m.ip), 0));
	m.icmp.type = ICMP_DEST_UNREACH;
	m.icmp.code = ICMP_FRAG_NEEDED;
	m.icmp.rest = bpf_htonl(mtu & 0xffff); // 16 unused bits, then the MTU
	m.icmp.checksum =
		~csum_fold(bpf_csum_diff(0, 0, (__be32 *)&m.icmp, sizeof(m.icmp) + sizeof(m.quote), 0));
	if (bpf_skb_change_tail(skb, l2 + sizeof(m), 0) || bpf_skb_store_bytes(skb, IP_OFF, &m, sizeof(m), 0))
		return TC_ACT_SHOT;
	count_mtu(M_TOO_BIG_DROPS);
	return to_tunnel(skb, l2, cfg, peer);
}

// ---- Fragments (docs/packet.md, "Fragments"). A datagram larger than its
// sender's MTU arrives in fragments, and only the first holds the ports that
// pick a flow. The first goes through the path an unfragmented packet takes
// and leaves, in frags, what was done to it; the others follow it. A
// fragment that comes before its first (reordered) is not translated. ----

// track records what was done to a datagram's first fragment p, seen by
// the hook of peer (0: the LAN device), for the fragments that follow.
static __always_inline void track(struct pkt *p, __be32 peer, __u16 how, __be32 gw, __be32 saddr, __be32 daddr,
				  __be16 id, __u32 ifindex, __be32 nh)
{
	struct frag_key k = {.peer = peer, .saddr = p->saddr, .daddr = p->daddr, .id = p->id, .proto = p->proto};
	struct frag_val v = {
		.gw = gw, .saddr = saddr, .daddr = daddr, .ifindex = ifindex, .nh = nh, .id = id, .how = how};
	bpf_map_update_elem(&frags, &k, &v, BPF_ANY);
	if (how != FRAG_DROP)
		count_frag(F_FRAGMENTED_DATAGRAMS);
}

// next_id is an IPv4 ID for a datagram the exporting gateway SNATs: the
// target reassembles by (source, destination, ID, protocol), and every
// client's datagram leaves with the same SNAT source, so the clients' own
// IDs could meet there. Each CPU hands out its own range of 4096.
static __always_inline __be16 next_id(void)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&frag_ids, &zero);
	__u32 v = 0;
	if (n)
		v = (*n)++;
	return bpf_htons((__u16)((bpf_get_smp_processor_id() & 15) << 12 | (v & 0xfff)));
}

// set_ip writes a packet's addresses and ID, and its IP checksum to match.
// Only the IP header: the L4 checksum (in the first fragment) was fixed with
// the first fragment.
static __always_inline int set_ip(struct __sk_buff *skb, const __u32 l2, __be32 saddr, __be32 daddr, __be16 id)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + IP_OFF;
	if ((void *)(ip + 1) > end)
		return -1;
	if (ip->saddr == saddr && ip->daddr == daddr && ip->id == id)
		return 0; // the import and delivery paths change nothing
	__u32 d = csum_add(csum_add(csum_add(~ip->saddr, ~ip->daddr), saddr), daddr);
	d = csum_add(csum_add(d, ~(__u32)ip->id), id);
	ip->check = ~csum_fold(csum_add((__u16)~ip->check, d));
	ip->saddr = saddr;
	ip->daddr = daddr;
	ip->id = id;
	return 0;
}

#define NOT_TRACKED (-100)

// follow sends a fragment that is not its datagram's first the way the
// first went, or returns NOT_TRACKED when no first fragment was seen.
static __always_inline int follow(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p,
				  __be32 peer)
{
	struct frag_key k = {.peer = peer, .saddr = p->saddr, .daddr = p->daddr, .id = p->id, .proto = p->proto};
	struct frag_val *fv = bpf_map_lookup_elem(&frags, &k);
	if (!fv)
		return NOT_TRACKED;
	struct frag_val v = *fv;
	if (v.how == FRAG_DROP) {
		count(C_FRAGMENTS);
		return TC_ACT_SHOT;
	}
	if (set_ip(skb, l2, v.saddr, v.daddr, v.id))
		return TC_ACT_SHOT;
	count_frag(F_FRAGMENTS_FOLLOWED);
	switch (v.how) {
	case FRAG_TUNNEL:
		return to_tunnel(skb, l2, cfg, v.gw);
	case FRAG_NEXT_HOP:
		return to_next_hop(v.ifindex, v.nh);
	case FRAG_ROUTE:
		return to_local(skb, cfg, v.saddr, v.daddr);
	}
	return to_kernel(skb);
}

// pick_gateway returns the gateway for a new or pinned import flow, or 0.
static __always_inline __be32 pick_gateway(struct __sk_buff *skb, struct config *cfg, struct pkt *p,
					    struct import_val *imp)
{
	struct flow_key fk = {
		.saddr = p->saddr, .daddr = p->daddr, .sport = p->sport, .dport = p->dport, .proto = p->proto};
	struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
	int repin = 0;
	if (fv) {
		// The flow's gateway was alive at alive_epoch, and peers has
		// not been written since: no lookup. Else look, and stamp.
		__u32 epoch = peers_epoch();
		if (epoch && fv->alive_epoch == epoch)
			return fv->gw;
		struct peer_val *pv = bpf_map_lookup_elem(&peers, &fv->gw);
		if (pv && (pv->flags & PEER_ALIVE)) {
			if (epoch)
				fv->alive_epoch = epoch;
			return fv->gw;
		}
		repin = 1;
	} else if (!policy_allows(0, imp->id, p->saddr)) {
		count(C_EGRESS_POLICY_DROPS);
		return 0;
	}
	__u32 ti = imp->table;
	struct table_info *t = bpf_map_lookup_elem(&tables, &ti);
	if (!t || !t->size)
		return 0;
	__u64 key = flow_hash(p->proto, p->saddr, p->sport, p->daddr, p->dport);
	__u32 bucket = t->base + (__u32)mulhi(mix64(key ^ t->seed), t->size);
	__be32 *gw = bpf_map_lookup_elem(&maglev, &bucket);
	if (!gw || !*gw)
		return 0;
	struct flow_val nv = {.gw = *gw};
	nv.ifindex = route(skb, cfg, p->daddr, p->saddr, &nv.nh);
	bpf_map_update_elem(&flows, &fk, &nv, BPF_ANY);
	count(repin ? C_IMPORT_REPINNED_FLOWS : C_IMPORT_FLOWS);
	return nv.gw;
}

// icmp_reply translates an ICMP error that a target (or a router before
// it) sent about an export flow: the quoted packet is snat→target, and the
// client must see client→clusterset IP.
static __always_inline int icmp_reply(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p)
{
	if (p->icmp_type != ICMP_DEST_UNREACH && p->icmp_type != ICMP_TIME_EXCEEDED)
		return TC_ACT_OK;
	struct iphdr in;
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, IN_IP_OFF, &in, sizeof(in)) || bpf_skb_load_bytes(skb, IN_L4_OFF, ports, 4)) {
		count(C_MALFORMED_DROPS);
		return TC_ACT_SHOT;
	}
	if (in.ihl != 5 || in.saddr != cfg->snat_addr)
		return TC_ACT_OK;
	struct rnat_key rk = {.taddr = in.daddr, .tport = ports[1], .sport = ports[0], .proto = in.protocol};
	struct rnat_val *c = bpf_map_lookup_elem(&rnat, &rk);
	if (!c)
		return TC_ACT_OK;
	struct nat_key ck = c->flow;
	// Outer header: from the clusterset IP to the client (ICMP has no
	// pseudo-header).
	if (set_addr(skb, l2, IP_SRC_OFF, p->saddr, ck.vaddr, 0, 0) || set_addr(skb, l2, IP_DST_OFF, p->daddr, ck.caddr, 0, 0))
		return TC_ACT_SHOT;
	// Quoted header: client:cport → vaddr:vport. Its IP checksum changes
	// with the addresses, and the ICMP checksum with all of it.
	__be16 ocsum = in.check;
	// One's-complement arithmetic is byte-order neutral: the sums stay in
	// the packet's byte order throughout.
	__u32 sum = csum_add(csum_add(csum_add(~in.saddr, ~in.daddr), ck.caddr), ck.vaddr);
	__be16 ncsum = ~csum_fold(csum_add((__u16)~ocsum, sum));
	struct {
		__be32 saddr, daddr;
		__be16 sport, dport;
	} nw = {ck.caddr, ck.vaddr, ck.cport, ck.vport};
	if (bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, in.saddr, ck.caddr, 4) ||
	    bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, in.daddr, ck.vaddr, 4) ||
	    bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, ports[0], ck.cport, 2) ||
	    bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, ports[1], ck.vport, 2) ||
	    bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, ocsum, ncsum, 2))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, IN_IP_OFF + offsetof(struct iphdr, check), &ncsum, 2, 0) ||
	    bpf_skb_store_bytes(skb, IN_IP_OFF + offsetof(struct iphdr, saddr), &nw.saddr, 8, 0) ||
	    bpf_skb_store_bytes(skb, IN_L4_OFF, &nw.sport, 4, 0))
		return TC_ACT_SHOT;
	count(C_ICMP_ERROR_TX_PACKETS);
	return to_tunnel(skb, l2, cfg, ck.peer);
}

// nat_reply restores a target's reply to the SNAT address to clusterset
// IP:port → client:port and sends it back to the importing gateway.
static __always_inline int nat_reply(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p)
{
	struct rnat_key rk = {.taddr = p->saddr, .tport = p->sport, .sport = p->dport, .proto = p->proto};
	struct rnat_val *c = bpf_map_lookup_elem(&rnat, &rk);
	if (!c)
		return TC_ACT_OK;
	touch(&c->seen);
	struct nat_key ck = c->flow;
	if (translate(skb, l2, p->proto, p->saddr, ck.vaddr, p->sport, ck.vport, p->daddr, ck.caddr, p->dport,
		      ck.cport))
		return TC_ACT_SHOT;
	if (p->proto == IPPROTO_TCP)
		clamp_mss(skb, cfg->mss, ck.peer, l2);
	if (p->first_frag)
		track(p, 0, FRAG_TUNNEL, ck.peer, ck.vaddr, ck.caddr, p->id, 0, 0);
	count(C_REPLY_TX_PACKETS);
	return to_tunnel(skb, l2, cfg, ck.peer);
}

// A health probe of package health (health.go): 12 bytes, "SH", version 1,
// a reserved zero byte, then the prober's sequence number. gateway's
// TestPacketMode sends what health.Encode writes.
#define HEALTH_PROBE_LEN 12

// lan_probe answers a health probe that a node of this gateway's cluster
// sends to one of this node's own addresses on the probe port — the lab's
// nexthop watcher, or whatever spreads the cluster's clients over its
// gateways (docs/packet.md, "Health") — by sending it back out of the
// device it came in by, addresses, ports and link-layer addresses swapped
// (no checksum changes, as in probe below). So an importing gateway node
// is judged by the programs that forward its clients' flows, not by its
// gateway process: a killed process's programs go on forwarding, and a
// client moved off the node would take its connections where no flow
// entry knows them. A node whose programs are gone answers nothing (the
// kernel refuses the probe: no socket has the port), one that is down
// answers nothing either. Anything that is not such a probe goes on to
// the stack untouched; an answer (from the probe port) is never answered,
// so two nodes cannot bounce a packet between them.
static __always_inline int lan_probe(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p)
{
	if (cfg->lan_quiet)
		return TC_ACT_OK; // cut off from the peers: no socket has the port, the kernel refuses it
	if (p->sport == bpf_htons(cfg->probe_port) || skb->pkt_type != 0) // 0: PACKET_HOST, unicast to this device
		return TC_ACT_OK;
	if ((p->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000) || p->daddr == 0xffffffff)
		return TC_ACT_OK; // multicast, limited broadcast
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct udphdr *uh = data + L4_OFF;
	__u8 *msg = (void *)(uh + 1);
	if ((void *)(msg + HEALTH_PROBE_LEN) > end || uh->len != bpf_htons(sizeof(*uh) + HEALTH_PROBE_LEN) ||
	    msg[0] != 'S' || msg[1] != 'H' || msg[2] != 1 || msg[3] != 0)
		return TC_ACT_OK;
	// Only to this node itself: the FIB forwards nothing to a local
	// address (asked as for a packet from the tunnel device, the one
	// device that forwards, as in route). Nor to one it has no route to,
	// which the kernel would drop: such a probe is answered too.
	struct bpf_fib_lookup fib = {};
	fib.family = 2; // AF_INET
	fib.ipv4_src = p->saddr;
	fib.ipv4_dst = p->daddr;
	fib.ifindex = cfg->tun_ifindex;
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH) != BPF_FIB_LKUP_RET_NOT_FWDED)
		return TC_ACT_OK;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + IP_OFF;
	__be16 *ports = data + L4_OFF;
	if ((void *)(ip + 1) > end || (void *)(ports + 2) > end)
		return TC_ACT_OK;
	if (l2) {
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > end)
			return TC_ACT_OK;
		__u8 mac[ETH_ALEN];
		__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	}
	ip->saddr = p->daddr;
	ip->daddr = p->saddr;
	ports[0] = p->dport;
	ports[1] = p->sport;
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int lan(struct __sk_buff *skb, const __u32 l2)
{
	struct config *cfg = get_config();
	if (!cfg || !cfg->tun_ifindex)
		return TC_ACT_OK;
	struct pkt p;
	int rc = parse(skb, l2, &p);
	if (rc == P_PASS || rc == P_MALFORMED)
		return TC_ACT_OK; // not ours to judge: the kernel's path decides
	if (p.proto == IPPROTO_ICMP) {
		if (rc == P_OK && p.daddr == cfg->snat_addr)
			return icmp_reply(skb, l2, cfg, &p);
		return TC_ACT_OK;
	}
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return TC_ACT_OK;
	if (rc == P_FRAGMENT) {
		// A later fragment of an import's or a target's datagram
		// follows its first. Any other is not ours to judge (a
		// datagram to this node, or one whose first fragment came
		// late): the kernel's path decides, and it is counted.
		int v = follow(skb, l2, cfg, &p, 0);
		if (v != NOT_TRACKED)
			return v;
		count(C_FRAGMENTS);
		return TC_ACT_OK;
	}
	if (rc != P_OK) {
		count(C_IP_OPTIONS);
		return TC_ACT_OK;
	}

	// The SNAT address is never a clusterset IP: a target's reply needs
	// no lookup in imports.
	if (p.daddr == cfg->snat_addr)
		return nat_reply(skb, l2, cfg, &p);

	struct svc_key ik = {.addr = p.daddr, .port = p.dport, .proto = p.proto};
	struct import_val *imp = bpf_map_lookup_elem(&imports, &ik);
	if (imp) {
		struct import_val iv = *imp;
		__be32 gw = pick_gateway(skb, cfg, &p, &iv);
		if (p.first_frag)
			// The rest of a datagram denied or without a gateway is
			// dropped too, not left to the kernel's routes.
			track(&p, 0, gw ? FRAG_TUNNEL : FRAG_DROP, gw, p.saddr, p.daddr, p.id, 0, 0);
		if (!gw) {
			count(C_IMPORT_NO_GATEWAY_DROPS);
			return TC_ACT_SHOT;
		}
		if (p.proto == IPPROTO_TCP)
			clamp_mss(skb, cfg->mss, gw, l2);
		count(C_IMPORT_TX_PACKETS);
		return to_tunnel(skb, l2, cfg, gw);
	}
	// Last, so that no packet of a flow or service pays for it.
	if (p.proto == IPPROTO_UDP && cfg->probe_port && p.dport == bpf_htons(cfg->probe_port))
		return lan_probe(skb, l2, cfg, &p);
	return TC_ACT_OK;
}

SEC("tc")
int lan_ingress(struct __sk_buff *skb)
{
	return lan(skb, ETH_HLEN);
}

// lan_ingress_l3 is lan_ingress for a layer-3 LAN device (no link header).
SEC("tc")
int lan_ingress_l3(struct __sk_buff *skb)
{
	return lan(skb, 0);
}

// nat_port picks the i-th candidate SNAT port of a flow: first the client's
// own port, then ports spread by the flow's hash over the range.
static __always_inline __be16 nat_port(struct config *cfg, struct nat_key *k, __u32 i)
{
	__u32 lo = cfg->port_min, hi = cfg->port_max;
	if (!lo || hi < lo) {
		lo = 1024;
		hi = 65535;
	}
	__u16 cport = bpf_ntohs(k->cport);
	if (i == 0 && cport >= lo && cport <= hi)
		return k->cport;
	__u64 h = mix64(((__u64)k->caddr << 32 | k->cport) ^ ((__u64)k->peer << 16) ^ ((__u64)i * GOLDEN));
	return bpf_htons((__u16)(lo + h % (hi - lo + 1)));
}

// reclaim frees the SNAT port of rk if its flow has been idle in both
// directions for cfg->idle_ns: LRU maps evict only when full, and a port
// held by a finished flow would otherwise stay taken.
static __always_inline int reclaim(struct config *cfg, struct rnat_key *rk, __u64 t)
{
	struct rnat_val *old = bpf_map_lookup_elem(&rnat, rk);
	if (!old || !cfg->idle_ns || t - old->seen < cfg->idle_ns)
		return 0;
	struct nat_key ok = old->flow;
	struct nat_val *fwd = bpf_map_lookup_elem(&nat, &ok);
	if (fwd && t - fwd->seen < cfg->idle_ns)
		return 0;
	bpf_map_delete_elem(&nat, &ok);
	return 1;
}

static __always_inline int export_flow(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p,
				       struct export_val *ev, struct peer_val *pv, __be32 peer)
{
	struct nat_key nk = {.peer = peer,
			     .caddr = p->saddr,
			     .vaddr = p->daddr,
			     .cport = p->sport,
			     .vport = p->dport,
			     .proto = p->proto};
	struct nat_val nv;
	struct nat_val *cur = bpf_map_lookup_elem(&nat, &nk);
	if (cur) {
		touch(&cur->seen);
		nv = *cur;
	} else {
		if (!policy_allows(pv->cluster, ev->id, p->saddr)) {
			count(C_INGRESS_POLICY_DROPS);
			return TC_ACT_SHOT;
		}
		nv.taddr = ev->addr;
		nv.tport = ev->port;
		int ok = 0;
		__u64 t = now();
		nv.seen = t;
		nv.nh = 0;
		nv.ifindex = route(skb, cfg, cfg->snat_addr, nv.taddr, &nv.nh);
		struct rnat_val rv = {.flow = nk, .seen = t};
		for (__u32 i = 0; i < NAT_TRIES; i++) {
			nv.sport = nat_port(cfg, &nk, i);
			struct rnat_key rk = {.taddr = nv.taddr, .tport = nv.tport, .sport = nv.sport, .proto = p->proto};
			if (bpf_map_update_elem(&rnat, &rk, &rv, BPF_NOEXIST) == 0) {
				ok = 1;
				break;
			}
			if (reclaim(cfg, &rk, t) && bpf_map_update_elem(&rnat, &rk, &rv, BPF_ANY) == 0) {
				ok = 1;
				break;
			}
		}
		if (!ok) {
			count(C_NAT_EXHAUSTED_DROPS);
			return TC_ACT_SHOT;
		}
		bpf_map_update_elem(&nat, &nk, &nv, BPF_ANY);
		count(C_EXPORT_FLOWS);
	}
	if (nv.ifindex) {
		__u32 mtu = too_big(skb, l2, nv.ifindex);
		if (mtu) {
			if (p->first_frag) // the rest of the datagram is dropped too
				track(p, peer, FRAG_DROP, 0, 0, 0, 0, 0, 0);
			return frag_needed(skb, l2, cfg, peer, mtu);
		}
	}
	if (translate(skb, l2, p->proto, p->saddr, cfg->snat_addr, p->sport, nv.sport, p->daddr, nv.taddr, p->dport,
		      nv.tport))
		return TC_ACT_SHOT;
	if (p->first_frag) {
		__be16 id = next_id();
		if (set_ip(skb, l2, cfg->snat_addr, nv.taddr, id))
			return TC_ACT_SHOT;
		track(p, peer, nv.ifindex ? FRAG_NEXT_HOP : FRAG_KERNEL, 0, cfg->snat_addr, nv.taddr, id, nv.ifindex,
		      nv.nh);
	}
	count(C_EXPORT_RX_PACKETS);
	if (!nv.ifindex)
		return to_kernel(skb);
	return to_next_hop(nv.ifindex, nv.nh);
}

// icmp_to_target gives a target the ICMP error that the importing gateway's
// programs sent about one of its replies (frag_needed: the reply was too
// big for the client's LAN). The error quotes the reply as the importing
// side saw it, clusterset IP:port → client:port, and goes from the client
// to the clusterset IP; the target sent target:port → SNAT address:port
// and can match only that. So the quote is restored to what the target
// sent, the error goes from the SNAT address to the target, by the NAT
// entry's route. NOT_TRACKED when no NAT entry of this peer matches.
static __always_inline int icmp_to_target(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p,
					  __be32 peer, struct iphdr *in, __be16 *ports)
{
	struct nat_key nk = {.peer = peer,
			     .caddr = in->daddr,
			     .vaddr = in->saddr,
			     .cport = ports[1],
			     .vport = ports[0],
			     .proto = in->protocol};
	struct nat_val *cur = bpf_map_lookup_elem(&nat, &nk);
	if (!cur || !cur->ifindex || in->ihl != 5 || p->daddr != in->saddr)
		return NOT_TRACKED;
	struct nat_val nv = *cur;
	struct {
		struct iphdr ip;
		__be16 ports[2];
	} oq = {.ip = *in, .ports = {ports[0], ports[1]}}, nq;
	nq = oq;
	nq.ip.saddr = nv.taddr;
	nq.ip.daddr = cfg->snat_addr;
	nq.ports[0] = nv.tport;
	nq.ports[1] = nv.sport;
	__u32 d = csum_add(csum_add(csum_add(~in->saddr, ~in->daddr), nv.taddr), cfg->snat_addr);
	nq.ip.check = ~csum_fold(csum_add((__u16)~oq.ip.check, d));
	// The ICMP checksum covers the quote: add what changed in it.
	__s64 diff = bpf_csum_diff((__be32 *)&oq, sizeof(oq), (__be32 *)&nq, sizeof(nq), 0);
	if (diff < 0 || bpf_l4_csum_replace(skb, ICMP_CSUM_OFF, 0, (__u32)diff, 0) ||
	    bpf_skb_store_bytes(skb, IN_IP_OFF, &nq, sizeof(nq), 0))
		return TC_ACT_SHOT;
	if (set_addr(skb, l2, IP_SRC_OFF, p->saddr, cfg->snat_addr, 0, 0) ||
	    set_addr(skb, l2, IP_DST_OFF, p->daddr, nv.taddr, 0, 0))
		return TC_ACT_SHOT;
	return to_next_hop(nv.ifindex, nv.nh);
}

// probe answers a peer gateway's liveness probe and delivers the answers to
// this node's own (docs/packet.md, "Health"). A probe is a UDP packet from
// the peer's underlay address to this node's, to the probe port: sent back
// through the tunnel with addresses and ports swapped, it proves to the
// peer's prober the whole path — underlay, VXLAN device, this program and
// its peers entry — whether or not this node's gateway process runs. An
// answer (from the probe port) goes to the local stack, where the
// prober's UDP socket reads it. Both must come from the tunnel packet's
// outer source to its outer destination, so a peer can neither make this
// node send elsewhere nor reach any other local or forwarded address; an
// answer is recognised first, so a packet with both ports set cannot
// bounce between two nodes.
static __always_inline int probe(struct __sk_buff *skb, const __u32 l2, struct config *cfg, struct pkt *p,
				 __be32 peer, __be32 local)
{
	__be16 port = bpf_htons(cfg->probe_port);
	if (p->saddr != peer || p->daddr != local || (p->sport != port && p->dport != port)) {
		count(C_UNKNOWN_SERVICE_DROPS);
		return TC_ACT_SHOT;
	}
	if (p->sport == port) {
		bpf_skb_change_type(skb, 0); // PACKET_HOST, as in to_kernel
		return TC_ACT_OK;
	}
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + IP_OFF;
	__be16 *ports = data + L4_OFF;
	if ((void *)(ip + 1) > end || (void *)(ports + 2) > end)
		return TC_ACT_SHOT;
	// One's-complement sums do not depend on the order of their words:
	// swapped addresses and ports leave every checksum as it was.
	ip->saddr = local;
	ip->daddr = peer;
	ports[0] = p->dport;
	ports[1] = p->sport;
	return to_tunnel(skb, l2, cfg, peer);
}

SEC("tc")
int tun_ingress(struct __sk_buff *skb)
{
	const __u32 l2 = ETH_HLEN; // the VXLAN device carries Ethernet frames
	struct config *cfg = get_config();
	if (!cfg)
		return TC_ACT_SHOT;
	struct bpf_tunnel_key key = {};
	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0)) {
		count(C_NON_PEER_DROPS);
		return TC_ACT_SHOT;
	}
	__be32 peer = bpf_htonl(key.remote_ipv4);
	struct peer_val pv;
	if (!lookup_peer(peer, &pv)) {
		count(C_NON_PEER_DROPS);
		return TC_ACT_SHOT;
	}
	struct pkt p;
	int rc = parse(skb, l2, &p);
	if (rc == P_FRAGMENT) {
		int v = follow(skb, l2, cfg, &p, peer);
		if (v != NOT_TRACKED)
			return v;
	}
	if (rc != P_OK) {
		count(rc == P_FRAGMENT ? C_FRAGMENTS : rc == P_OPTIONS ? C_IP_OPTIONS : C_MALFORMED_DROPS);
		return TC_ACT_SHOT;
	}
	if (p.proto == IPPROTO_TCP || p.proto == IPPROTO_UDP) {
		struct svc_key ek = {.addr = p.daddr, .port = p.dport, .proto = p.proto};
		struct export_val e;
		if (lookup_export(&ek, &e)) {
			if (p.proto == IPPROTO_TCP)
				clamp_mss(skb, cfg->mss, peer, l2);
			return export_flow(skb, l2, cfg, &p, &e, &pv, peer);
		}
		// A reply to a pinned import flow, from the gateway it is
		// pinned to, goes by the route cached in the flow entry.
		struct flow_key fk = {
			.saddr = p.daddr, .daddr = p.saddr, .sport = p.dport, .dport = p.sport, .proto = p.proto};
		struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
		if (fv && fv->gw == peer && fv->ifindex) {
			__u32 ifindex = fv->ifindex;
			__be32 nh = fv->nh;
			__u32 mtu = too_big(skb, l2, ifindex);
			if (mtu) {
				// Back to the exporting gateway, which gives the
				// error to the target (icmp_to_target).
				if (p.first_frag)
					track(&p, peer, FRAG_DROP, 0, 0, 0, 0, 0, 0);
				return frag_needed(skb, l2, cfg, peer, mtu);
			}
			if (p.first_frag)
				track(&p, peer, FRAG_NEXT_HOP, 0, p.saddr, p.daddr, p.id, ifindex, nh);
			count(C_REPLY_RX_PACKETS);
			return to_next_hop(ifindex, nh);
		}
		struct svc_key ik = {.addr = p.saddr, .port = p.sport, .proto = p.proto};
		if (bpf_map_lookup_elem(&imports, &ik)) {
			if (p.first_frag)
				track(&p, peer, FRAG_ROUTE, 0, p.saddr, p.daddr, p.id, 0, 0);
			count(C_REPLY_RX_PACKETS);
			return to_local(skb, cfg, p.saddr, p.daddr);
		}
		// Last, so that no packet of a flow or service pays for it
		// (probes are never fragmented).
		if (p.proto == IPPROTO_UDP && cfg->probe_port && !p.first_frag)
			return probe(skb, l2, cfg, &p, peer, bpf_htonl(key.local_ipv4));
	} else if (p.proto == IPPROTO_ICMP &&
		   (p.icmp_type == ICMP_DEST_UNREACH || p.icmp_type == ICMP_TIME_EXCEEDED)) {
		// An error about an import flow: the quoted packet went from
		// the client to an import's clusterset IP:port.
		struct iphdr in;
		__be16 ports[2];
		if (bpf_skb_load_bytes(skb, IN_IP_OFF, &in, sizeof(in)) ||
		    bpf_skb_load_bytes(skb, IN_L4_OFF, ports, 4)) {
			count(C_MALFORMED_DROPS);
			return TC_ACT_SHOT;
		}
		struct svc_key ik = {.addr = in.daddr, .port = ports[1], .proto = in.protocol};
		if (in.saddr == p.daddr && bpf_map_lookup_elem(&imports, &ik)) {
			count(C_REPLY_RX_PACKETS);
			return to_local(skb, cfg, p.saddr, p.daddr);
		}
		int v = icmp_to_target(skb, l2, cfg, &p, peer, &in, ports);
		if (v != NOT_TRACKED)
			return v;
	}
	count(C_UNKNOWN_SERVICE_DROPS);
	return TC_ACT_SHOT;
}
