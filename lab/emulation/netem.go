package emulation

import "strconv"

// NetemArgs renders p as the arguments that follow `tc qdisc add dev X root
// netem`. Uniform jitter is netem's behaviour without a distribution table,
// so it names none. Netem reorders jittered packets unless a rate is set;
// Reorder cannot switch that off there, which is one reason the userspace
// emulator exists even where netem does.
func (p Params) NetemArgs() []string {
	limit := p.QueueLimit()
	if p.Limit == 0 && p.Rate != 0 {
		// netem's limit also counts packets serving their delay; the
		// userspace emulator's counts only those waiting for the line.
		limit += int(float64(p.Rate) * (p.Delay + p.Jitter).Seconds() / (8 * 1500))
	}
	args := []string{"limit", strconv.Itoa(limit)}
	if p.Delay != 0 || p.Jitter != 0 {
		args = append(args, "delay", usec(p.Delay))
		if p.Jitter != 0 {
			args = append(args, usec(p.Jitter))
			if d := p.Dist(); d != Uniform {
				args = append(args, "distribution", string(d))
			}
		}
	}
	if p.Loss != 0 {
		args = append(args, "loss", "random", FormatPercent(p.Loss))
		if p.LossCorrelation != 0 {
			args = append(args, FormatPercent(p.LossCorrelation))
		}
	}
	if p.Rate != 0 {
		args = append(args, "rate", strconv.FormatUint(p.Rate, 10)+"bit")
	}
	return args
}

func usec(d interface{ Microseconds() int64 }) string {
	return strconv.FormatInt(d.Microseconds(), 10) + "us"
}
