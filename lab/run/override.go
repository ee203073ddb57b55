package run

import (
	"fmt"
	"slices"
	"strings"
)

// Overrides narrow or change an experiment from the command line, e.g. to
// run a catalog experiment on one scenario with fewer repetitions. Empty
// fields change nothing.
type Overrides struct {
	Scenarios   []string
	Tools       []string
	Workloads   []string // keep only these workloads
	Payloads    []string // replace the payloads of workloads that take a body
	Repetitions int
	Requests    int
	// Duration is the soak's length (e.g. "60m"); only for experiments
	// with a soak section.
	Duration string
	// ComposePath sets the experiment's compose-path.
	ComposePath bool
	// CPULatency sets the experiment's cpu-latency (e.g. "0"); "host"
	// unsets it, measuring the host as it is.
	CPULatency string
}

// Override applies o and validates the result again. The experiment's
// recorded source gains a line per override, so a resumed run must use the
// same ones.
func (e *Experiment) Override(o Overrides) error {
	var notes []string
	if len(o.Scenarios) > 0 {
		e.Scenarios = o.Scenarios
		if tp := e.Throughput; tp != nil && len(tp.Scenarios) > 0 {
			tp.Scenarios = slices.DeleteFunc(tp.Scenarios, func(s string) bool { return !slices.Contains(o.Scenarios, s) })
			if len(tp.Scenarios) == 0 {
				e.Throughput = nil // measured in none of the scenarios kept
			}
		}
		notes = append(notes, "scenarios="+strings.Join(o.Scenarios, ","))
	}
	if len(o.Tools) > 0 {
		e.Tools = o.Tools
		notes = append(notes, "tools="+strings.Join(o.Tools, ","))
	}
	// Workload and payload overrides apply to the closed-loop workloads
	// and to the rate section's alike.
	lists := []*[]Workload{&e.Workloads}
	if e.Rate != nil {
		lists = append(lists, &e.Rate.Workloads)
	}
	if len(o.Workloads) > 0 {
		for _, name := range o.Workloads {
			if !slices.Contains(e.servedWorkloads(), name) {
				return fmt.Errorf("--workloads: the experiment has no workload %q", name)
			}
		}
		for _, l := range lists {
			*l = slices.DeleteFunc(*l, func(w Workload) bool { return !slices.Contains(o.Workloads, w.Name) })
		}
		if e.Rate != nil && len(e.Rate.Workloads) == 0 {
			e.Rate = nil // every rate workload was filtered out
		}
		notes = append(notes, "workloads="+strings.Join(o.Workloads, ","))
	}
	if len(o.Payloads) > 0 {
		for _, l := range lists {
			for i := range *l {
				if w := &(*l)[i]; w.Name == "echo" || w.Name == "recv" {
					w.Payloads = o.Payloads
					w.Requests = keepRequests(w.Requests, o.Payloads)
				}
			}
		}
		notes = append(notes, "payloads="+strings.Join(o.Payloads, ","))
	}
	if o.Repetitions != 0 {
		e.Repetitions = o.Repetitions
		notes = append(notes, fmt.Sprintf("repetitions=%d", o.Repetitions))
	}
	if o.Requests != 0 {
		e.Load.Requests = o.Requests
		for i := range e.Workloads { // rate workloads have none (Rate.validate)
			e.Workloads[i].Requests = nil // every cell sends what the flag says
		}
		notes = append(notes, fmt.Sprintf("requests=%d", o.Requests))
	}
	if o.Duration != "" {
		if e.Soak == nil {
			return fmt.Errorf("--duration %s: the experiment has no soak section", o.Duration)
		}
		e.Soak.Duration = o.Duration
		notes = append(notes, "duration="+o.Duration)
	}
	if o.ComposePath {
		e.ComposePath = true
		notes = append(notes, "compose-path")
	}
	if o.CPULatency != "" {
		e.CPULatency = o.CPULatency
		if o.CPULatency == "host" {
			e.CPULatency = ""
		}
		notes = append(notes, "cpu-latency="+o.CPULatency)
	}
	if len(notes) == 0 {
		return nil
	}
	e.scenarios = nil
	if err := e.resolve(e.dir); err != nil {
		return err
	}
	e.source = append(e.source, []byte("\n# overrides: "+strings.Join(notes, " ")+"\n")...)
	return nil
}

// keepRequests is the per-payload request counts of those payloads still
// listed (matched by size: 1KB and 1000 are one payload).
func keepRequests(requests map[string]int, payloads []string) map[string]int {
	kept := map[string]int{}
	for p, n := range requests {
		size, err := ParseSize(p)
		if err != nil {
			kept[p] = n // resolve reports it
			continue
		}
		for _, q := range payloads {
			if qs, err := ParseSize(q); err == nil && qs == size {
				kept[p] = n
			}
		}
	}
	return kept
}
