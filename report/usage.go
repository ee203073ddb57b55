package report

import (
	"strconv"
)

// ProcessUsage is one process's CPU time and peak resident memory over a
// measurement, as lab/usage reads them.
type ProcessUsage struct {
	Name         string  `json:"name"`
	Node         string  `json:"node,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
}

// Usage is what one repetition of a cell cost the tool: its processes'
// CPU time and peak RSS over the measurement, and the work done in it
// (bytes received, or requests) to normalize by. Kernel marks a tool
// without a process (routing, VXLAN): the kernel does its work in softirq
// context, which no process accounts for and host-wide counters mix with
// every other lab on the host, so it is not measured. Emulator is the
// userspace link emulator's cost over the same window: the lab's own, not
// the tool's; absent when no emulator runs (tbf, netem or no impairment).
type Usage struct {
	Kernel    bool           `json:"kernel,omitempty"`
	Processes []ProcessUsage `json:"processes,omitempty"`
	Emulator  *ProcessUsage  `json:"emulator,omitempty"`
	Seconds   float64        `json:"seconds"`
	Bytes     float64        `json:"bytes,omitempty"`
	Requests  float64        `json:"requests,omitempty"`
}

// UsageSummary is a cell's usage over its repetitions: CPU seconds summed,
// the peak RSS (the processes' peaks added up) the largest of any
// repetition. CPUSeconds and PeakRSSBytes are absent for a kernel data
// plane, never 0.
type UsageSummary struct {
	Kernel       bool           `json:"kernel,omitempty"`
	Reps         int            `json:"reps"`
	Seconds      float64        `json:"seconds"`
	CPUSeconds   *float64       `json:"cpu_seconds,omitempty"`
	PeakRSSBytes *int64         `json:"peak_rss_bytes,omitempty"`
	Processes    []ProcessUsage `json:"processes,omitempty"`
	// EmulatorCPUSeconds is the link emulator's CPU time, summed.
	EmulatorCPUSeconds *float64 `json:"emulator_cpu_seconds,omitempty"`
	Bytes              float64  `json:"bytes,omitempty"`
	Requests           float64  `json:"requests,omitempty"`
	// CPUPerGB and CPUPer10kRequests normalize CPUSeconds by the work
	// done: per 10^9 bytes received, per 10 000 requests.
	CPUPerGB          *float64 `json:"cpu_seconds_per_gb,omitempty"`
	CPUPer10kRequests *float64 `json:"cpu_seconds_per_10k_requests,omitempty"`
}

// SummarizeUsage folds repetitions; nil without any.
func SummarizeUsage(reps []Usage) *UsageSummary {
	if len(reps) == 0 {
		return nil
	}
	s := &UsageSummary{Reps: len(reps)}
	var cpu, emu float64
	var peak int64
	emulated := false
	at := map[string]int{}
	for _, u := range reps {
		s.Seconds += u.Seconds
		s.Bytes += u.Bytes
		s.Requests += u.Requests
		if u.Kernel {
			s.Kernel = true
		}
		var rss int64
		for _, p := range u.Processes {
			cpu += p.CPUSeconds
			rss += p.PeakRSSBytes
			k := p.Name + "@" + p.Node
			i, ok := at[k]
			if !ok {
				i = len(s.Processes)
				at[k] = i
				s.Processes = append(s.Processes, ProcessUsage{Name: p.Name, Node: p.Node})
			}
			s.Processes[i].CPUSeconds = roundTick(s.Processes[i].CPUSeconds + p.CPUSeconds)
			s.Processes[i].PeakRSSBytes = max(s.Processes[i].PeakRSSBytes, p.PeakRSSBytes)
		}
		peak = max(peak, rss)
		if u.Emulator != nil {
			emulated = true
			emu += u.Emulator.CPUSeconds
		}
	}
	if emulated {
		v := roundTick(emu)
		s.EmulatorCPUSeconds = &v
	}
	if s.Kernel {
		return s
	}
	cpu = roundTick(cpu)
	s.CPUSeconds, s.PeakRSSBytes = &cpu, &peak
	// Work of both kinds (a tool's total over bulk and request cells) has
	// no single unit to normalize by.
	if s.Bytes > 0 && s.Requests == 0 {
		v := cpu / (s.Bytes / 1e9)
		s.CPUPerGB = &v
	}
	if s.Requests > 0 && s.Bytes == 0 {
		v := cpu / s.Requests * 1e4
		s.CPUPer10kRequests = &v
	}
	return s
}

func roundTick(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// Cell texts for tables. A kernel data plane says "kernel", a cell
// measured without usage (a run older than usage accounting) "not
// measured"; neither is ever 0.
const (
	KernelText      = "kernel"
	NotMeasuredText = "not measured"
)

// CPUText is the CPU seconds of u.
func (u *UsageSummary) CPUText() string {
	return u.text(func() (float64, bool) {
		if u.CPUSeconds == nil {
			return 0, false
		}
		return *u.CPUSeconds, true
	}, 2)
}

// PeakRSSText is the peak RSS in MB.
func (u *UsageSummary) PeakRSSText() string {
	return u.text(func() (float64, bool) {
		if u.PeakRSSBytes == nil {
			return 0, false
		}
		return float64(*u.PeakRSSBytes) / 1e6, true
	}, 1)
}

// PerGBText is CPU seconds per GB received.
func (u *UsageSummary) PerGBText() string {
	return u.text(func() (float64, bool) {
		if u.CPUPerGB == nil {
			return 0, false
		}
		return *u.CPUPerGB, true
	}, 3)
}

// Per10kText is CPU seconds per 10 000 requests.
func (u *UsageSummary) Per10kText() string {
	return u.text(func() (float64, bool) {
		if u.CPUPer10kRequests == nil {
			return 0, false
		}
		return *u.CPUPer10kRequests, true
	}, 3)
}

// EmulatorText is the link emulator's CPU seconds, "none" without one.
func (u *UsageSummary) EmulatorText() string {
	switch {
	case u == nil:
		return NotMeasuredText
	case u.EmulatorCPUSeconds == nil:
		return "none"
	}
	return strconv.FormatFloat(*u.EmulatorCPUSeconds, 'f', 2, 64)
}

func (u *UsageSummary) text(v func() (float64, bool), prec int) string {
	switch {
	case u == nil:
		return NotMeasuredText
	case u.Kernel:
		return KernelText
	}
	x, ok := v()
	if !ok {
		return NotMeasuredText
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// MergeUsage adds b's repetitions to a's totals, for run-wide totals per
// tool; either may be nil.
func MergeUsage(a, b *UsageSummary) *UsageSummary {
	if a == nil {
		if b == nil {
			return nil
		}
		c := *b
		c.Processes = append([]ProcessUsage(nil), b.Processes...)
		return &c
	}
	if b == nil {
		return a
	}
	reps := []Usage{usageOf(a), usageOf(b)}
	m := SummarizeUsage(reps)
	m.Reps = a.Reps + b.Reps
	if m.PeakRSSBytes != nil && a.PeakRSSBytes != nil && b.PeakRSSBytes != nil {
		v := max(*a.PeakRSSBytes, *b.PeakRSSBytes)
		m.PeakRSSBytes = &v
	}
	return m
}

// usageOf turns a summary back into one repetition's shape, to merge.
func usageOf(s *UsageSummary) Usage {
	u := Usage{Kernel: s.Kernel, Processes: s.Processes, Seconds: s.Seconds, Bytes: s.Bytes, Requests: s.Requests}
	if s.EmulatorCPUSeconds != nil {
		u.Emulator = &ProcessUsage{Name: "emulator", CPUSeconds: *s.EmulatorCPUSeconds}
	}
	return u
}
