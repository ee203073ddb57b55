// SPDX-License-Identifier: GPL-2.0
//
// wancc: the TCP congestion control of strait's WAN sessions (package
// wancc, docs/congestion.md). A loss while the path holds no queue of ours
// is taken for random loss — a lossy radio or WAN link — and costs the
// window an eighth; a loss behind a queue (the smoothed RTT above the
// minimum by more than the path's own jitter allowance) is congestion and
// costs it cubic's 30 %. Afterwards the window climbs back towards the
// largest it had since the last congestion by half the distance per round
// trip, then probes past it, faster the longer it meets no congestion.
//
// Written against the kernel's own structures with CO-RE (the layouts
// below name only the fields read or written; the loader relocates them
// with the running kernel's BTF).
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char _license[] SEC("license") = "GPL";

struct minmax_sample {
	__u32 t;
	__u32 v;
};

struct minmax {
	struct minmax_sample s[3];
};

struct sock {
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	__u64 icsk_ca_priv[13];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 snd_cwnd;
	__u8 is_cwnd_limited : 1;
	__u32 snd_ssthresh;
	struct minmax rtt_min;
	__u32 srtt_us;
	__u32 max_packets_out;
} __attribute__((preserve_access_index));

// The members of the kernel's struct tcp_congestion_ops this algorithm
// sets; the loader matches them by name.
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	char name[16];
};

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

// Each loss the kernel reported (one call of ssthresh per recovery
// episode), by what this algorithm took it for: index 0 random, 1 queue.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} losses SEC(".maps");

// The jitter allowance: a path's RTT samples scatter above its minimum
// without any queue (the lab's cloud30 WAN: 30 ms ± 6 ms), so only a
// smoothed RTT more than half the minimum, and at least min_allowance_us,
// above it counts as a queue. Set at load (wancc.Options.MinAllowance): WAN
// sockets take 2 ms for timer and scheduling noise on the way; LAN sockets
// none, so that a shallow switch buffer's few microseconds of queue still
// count as congestion next to a 50 µs minimum.
volatile const __u32 min_allowance_us = 2000;

// Per connection, in the kernel's icsk_ca_priv (104 bytes).
struct state {
	__u32 w_max;     // the largest window since the last congestion
	__u32 loss_cwnd; // the same, kept for undo after a spurious loss
};

static __always_inline struct state *state_of(struct sock *sk)
{
	return (struct state *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void count(__u32 kind)
{
	__u64 *n = bpf_map_lookup_elem(&losses, &kind);
	if (n)
		*n += 1;
}

SEC("struct_ops/wancc_init")
void BPF_PROG(wancc_init, struct sock *sk)
{
	struct state *s = state_of(sk);
	s->w_max = 0;
	s->loss_cwnd = 0;
}

SEC("struct_ops/wancc_ssthresh")
__u32 BPF_PROG(wancc_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct state *s = state_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 min = tp->rtt_min.s[0].v; // ~0 until the first sample
	__u32 srtt = tp->srtt_us >> 3;
	__u32 allow = min / 2;
	__u32 w;

	if (allow < min_allowance_us)
		allow = min_allowance_us;
	s->loss_cwnd = cwnd;
	if (min != ~0U && srtt < min + allow) {
		// Random loss says nothing about the path's capacity: the window
		// it climbs back to stays where it was, so a run of such losses
		// does not ratchet it down.
		count(0);
		if (cwnd > s->w_max)
			s->w_max = cwnd;
		w = cwnd - cwnd / 8;
	} else {
		count(1);
		s->w_max = cwnd;
		w = cwnd * 7 / 10;
	}
	return w > 2 ? w : 2;
}

SEC("struct_ops/wancc_undo_cwnd")
__u32 BPF_PROG(wancc_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct state *s = state_of(sk);
	return tp->snd_cwnd > s->loss_cwnd ? tp->snd_cwnd : s->loss_cwnd;
}

// cwnd_limited is the kernel's tcp_is_cwnd_limited: the window grows only
// while it limits what is sent (in slow start, up to twice what was in
// flight), so an application that sends in bursts does not inflate it.
static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return 1;
	return tp->snd_cwnd < tp->snd_ssthresh && tp->snd_cwnd < 2 * tp->max_packets_out;
}

SEC("struct_ops/wancc_cong_avoid")
void BPF_PROG(wancc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct state *s = state_of(sk);
	__u32 cwnd, per, step;

	if (!cwnd_limited(tp))
		return;
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	cwnd = tp->snd_cwnd;
	// Below w_max the window climbs back by half the distance per round
	// trip. Past it, it probes by as much as it is already past per round
	// trip (1, 1, 2, 4, ... segments), at most half the window: a session
	// whose window a loss fixed while it carried small requests reaches
	// the 72 segments of a 100 KB response in about eight round trips
	// where Reno's one segment per round trip took sixty.
	if (cwnd < s->w_max)
		step = (s->w_max - cwnd) / 2;
	else
		step = cwnd - s->w_max;
	if (step > cwnd / 2)
		step = cwnd / 2;
	if (step < 1)
		step = 1;
	// tcp_cong_avoid_ai adds a segment per `per` segments acknowledged,
	// so per = cwnd / step adds `step` segments per round trip.
	per = cwnd / step;
	if (per < 1)
		per = 1;
	tcp_cong_avoid_ai(tp, per, acked);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops wancc = {
	.init = (void *)wancc_init,
	.ssthresh = (void *)wancc_ssthresh,
	.cong_avoid = (void *)wancc_cong_avoid,
	.undo_cwnd = (void *)wancc_undo_cwnd,
	.name = "strait",
};
