package run

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/cpulatency"
)

// holdCPULatency holds the experiment's cpu-latency while the units run
// (release with Hold.Release; nil when the experiment leaves the host as it
// is) and says what was in force, for the metadata's host section: a run
// whose tools wake more processes per request than direct's pays the host's
// idle exits at each (README, "CPU idle states"), so a figure means
// little without it.
func holdCPULatency(e *Experiment, out io.Writer) (*cpulatency.Hold, string, error) {
	if e.cpuLatency == nil {
		cur, err := cpulatency.Current()
		if err != nil {
			return nil, "unknown (" + err.Error() + ")", nil
		}
		return nil, "the host's: " + describeLimit(cur), nil
	}
	h, err := cpulatency.Start(*e.cpuLatency)
	if err != nil {
		return nil, "", fmt.Errorf("cpu-latency %v: %w (--cpu-latency host measures the host as it is)", *e.cpuLatency, err)
	}
	cur, err := cpulatency.Current()
	if err == nil && cur > *e.cpuLatency {
		err = fmt.Errorf("the kernel's limit is %v after the request", cur)
	}
	if err != nil {
		_ = h.Release()
		return nil, "", fmt.Errorf("cpu-latency %v: %w", *e.cpuLatency, err)
	}
	said := "held at " + describeLimit(*e.cpuLatency) + " by the run"
	if cur < *e.cpuLatency {
		said += "; " + describeLimit(cur) + " in force (another request asks for less)"
	}
	what := ""
	if *e.cpuLatency == 0 {
		what = ": idle CPUs poll instead of halting"
	}
	fmt.Fprintf(out, "CPU latency QoS %s%s (cpuidle driver %s)\n", said, what, cpuIdleDriver())
	return h, said, nil
}

func describeLimit(d time.Duration) string {
	if d >= cpulatency.Max {
		return "no limit"
	}
	return fmt.Sprintf("%d µs", d/time.Microsecond)
}

// cpuIdleDriver names the kernel's cpuidle driver (haltpoll in a KVM
// guest, intel_idle on bare metal, …), which decides what an idle CPU does.
func cpuIdleDriver() string {
	b, err := os.ReadFile("/sys/devices/system/cpu/cpuidle/current_driver")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
