// Package cpulatency holds Linux's CPU latency QoS limit for as long as a
// lab run measures: the largest wake-up latency the CPUs' idle states may
// add, set through /dev/cpu_dma_latency (the kernel's pm_qos interface, as
// tuned's latency-performance profile and latency benchmarks use it).
//
// Why a lab needs it: every process that a request wakes from an idle CPU
// pays that CPU's exit from its idle state — on a virtual machine whose idle
// vCPUs halt, a trip through the hypervisor of tens of microseconds. A
// relay pays it at each of its hops (client, two gateways each way,
// server) where the kernel's forwarding pays it at the two ends only, so
// on such a host the cost measured for a relay is partly the host's power
// management (README, "CPU idle states"). Holding the limit at 0
// keeps idle CPUs polling instead, the same for every tool in the run.
package cpulatency

import (
	"errors"
	"fmt"
	"time"
)

// Max is the largest limit the kernel takes (PM_QOS_DEFAULT_VALUE's
// 2 000 000 000 µs means "no limit").
const Max = 2000 * time.Second

// Device is the kernel's interface: a request lives while its file is open.
const Device = "/dev/cpu_dma_latency"

// ErrUnsupported: the host has no CPU latency QoS device (not Linux, or a
// kernel without CONFIG_CPU_IDLE's pm_qos interface).
var ErrUnsupported = errors.New("no CPU latency QoS on this host (" + Device + ")")

// Hold is one request on the CPU latency QoS, in force until Release.
type Hold struct {
	release func() error
	limit   time.Duration
}

// Check returns an error naming what is wrong with limit, a wake-up latency
// of 0 to Max in whole microseconds.
func Check(limit time.Duration) error {
	switch {
	case limit < 0:
		return fmt.Errorf("%v: a wake-up latency must not be negative", limit)
	case limit > Max:
		return fmt.Errorf("%v: at most %v", limit, Max)
	case limit%time.Microsecond != 0:
		return fmt.Errorf("%v: the kernel takes whole microseconds", limit)
	}
	return nil
}

// Start asks the kernel to keep every CPU's wake-up latency within limit
// until Release (or until this process exits: the kernel drops the request
// with its file).
func Start(limit time.Duration) (*Hold, error) {
	if err := Check(limit); err != nil {
		return nil, err
	}
	release, err := request(int32(limit / time.Microsecond))
	if err != nil {
		return nil, err
	}
	return &Hold{release: release, limit: limit}, nil
}

// Limit is the limit this request holds.
func (h *Hold) Limit() time.Duration { return h.limit }

// Release ends the request; the limit goes back to what other requests
// (or none) ask for. It may be called more than once.
func (h *Hold) Release() error {
	if h == nil || h.release == nil {
		return nil
	}
	err := h.release()
	h.release = nil
	return err
}

// Current is the limit in force now, over every request on the host; Max
// when nobody asks for one.
func Current() (time.Duration, error) {
	us, err := current()
	if err != nil {
		return 0, err
	}
	return time.Duration(us) * time.Microsecond, nil
}
