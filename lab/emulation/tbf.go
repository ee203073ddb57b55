package emulation

import (
	"strconv"
	"time"
)

// RateOnly reports whether p only caps the rate: no delay, jitter or loss.
// Such a direction needs no emulator, a kernel token bucket (tbf) on the
// sending device's egress shapes it exactly. Reorder without jitter changes
// nothing, and a queue limit tbf has too.
func (p Params) RateOnly() bool {
	return p.Rate != 0 && p.Delay == 0 && p.Jitter == 0 && p.Loss == 0
}

// Undelayed reports whether p holds no packet back: no delay and no
// jitter. Such a direction needs no thread to release packets on time, so
// the kernel carries it (lab/emulator's AttachLoss drops, tbf caps the
// rate) instead of the userspace emulator, whose reader wake-up alone adds
// tens of µs per packet on a VM (see docs/topology.md, "Accuracy").
func (p Params) Undelayed() bool {
	return p.Delay == 0 && p.Jitter == 0
}

// TBFBurstTime is how much line time the token bucket holds. The bucket
// refills while the qdisc's watchdog timer waits to release the next
// packet; on a loaded host that timer fires late, and a bucket smaller than
// the lateness loses the tokens that overflow it, so the link runs below
// its rate. 2 ms covers the wakeup lateness seen on a 2-core host at load
// 15 and is 25 KB at 100 Mbit/s: a burst at veth speed of that size is what
// a real uplink's shaper lets through after an idle moment.
const TBFBurstTime = 2 * time.Millisecond

// tbfMinBurst keeps the bucket at least ten full-size frames deep, so at low
// rates every packet fits (tbf drops a packet larger than its bucket that it
// cannot segment) and small bursts pass as on a real line.
const tbfMinBurst = 10 * 1514

// TBFBurst returns the bucket size in bytes for p's rate.
func (p Params) TBFBurst() int {
	b := float64(p.Rate) / 8 * TBFBurstTime.Seconds()
	if b > 1<<30 {
		b = 1 << 30 // far beyond any sensible link; keeps the int in range
	}
	return max(tbfMinBurst, int(b))
}

// TBFLimit returns the queue, in bytes, that tbf holds behind the bucket:
// QueueLimit full-size (1500-byte) packets, the same queue the userspace
// emulator and netem give the link, so a backend change does not change
// how much a sender can queue (the uplink's buffer).
func (p Params) TBFLimit() int {
	l := int64(p.QueueLimit()) * 1500
	if l > 1<<31-1 {
		l = 1<<31 - 1 // tc's limit is a 32-bit byte count
	}
	return int(l)
}

// TBFQueueTime is how long a full TBFLimit queue takes to drain at the rate:
// the worst queueing delay the link adds.
func (p Params) TBFQueueTime() time.Duration {
	if p.Rate == 0 {
		return 0
	}
	return time.Duration(float64(p.TBFLimit()) * 8 / float64(p.Rate) * float64(time.Second))
}

// TBFArgsMTU is TBFArgs for a link of the given MTU: the bucket holds at
// least ten of its full-size frames, as it does for 1500-byte ones (tbf
// drops a packet larger than its bucket that it cannot segment).
func (p Params) TBFArgsMTU(mtu int) []string {
	args := p.TBFArgs()
	if b := 10 * (mtu + 14); b > p.TBFBurst() {
		args[3] = strconv.Itoa(b)
	}
	return args
}

// TBFArgs renders p as the arguments that follow `tc qdisc add dev X root
// tbf`. It is meant for RateOnly params.
func (p Params) TBFArgs() []string {
	return []string{
		"rate", strconv.FormatUint(p.Rate, 10) + "bit",
		"burst", strconv.Itoa(p.TBFBurst()),
		"limit", strconv.Itoa(p.TBFLimit()),
	}
}
