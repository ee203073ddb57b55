package report

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSummarizeUsage(t *testing.T) {
	if SummarizeUsage(nil) != nil {
		t.Error("no repetitions: want nil (not measured)")
	}
	var none *UsageSummary
	if none.CPUText() != NotMeasuredText || none.PerGBText() != NotMeasuredText || none.EmulatorText() != NotMeasuredText {
		t.Error("nil summary must read not measured")
	}
	k := SummarizeUsage([]Usage{{Kernel: true, Seconds: 5, Bytes: 1e9}})
	b, _ := json.Marshal(k)
	if k.CPUText() != KernelText || k.PeakRSSText() != KernelText || strings.Contains(string(b), "cpu_seconds") {
		t.Errorf("kernel: %s, %s; JSON %s must hold no CPU figure", k.CPUText(), k.PeakRSSText(), b)
	}
	p := func(cpu float64, rss int64) ProcessUsage {
		return ProcessUsage{Name: "gw", Node: "a", CPUSeconds: cpu, PeakRSSBytes: rss}
	}
	s := SummarizeUsage([]Usage{
		{Seconds: 5, Bytes: 2e9, Processes: []ProcessUsage{p(1, 100), {Name: "gw", Node: "b", CPUSeconds: 0.5, PeakRSSBytes: 50}}, Emulator: &ProcessUsage{CPUSeconds: 0.3}},
		{Seconds: 5, Bytes: 2e9, Processes: []ProcessUsage{p(1.5, 120), {Name: "gw", Node: "b", CPUSeconds: 0, PeakRSSBytes: 10}}, Emulator: &ProcessUsage{CPUSeconds: 0.2}},
	})
	if *s.CPUSeconds != 3 || *s.PeakRSSBytes != 150 || *s.CPUPerGB != 0.75 || s.CPUPer10kRequests != nil || *s.EmulatorCPUSeconds != 0.5 {
		t.Errorf("summary %+v: want 3 CPU s, peak 150 B, 0.75 s/GB, emulator 0.5 s", s)
	}
	if s.CPUText() != "3.00" || s.PerGBText() != "0.750" || s.EmulatorText() != "0.50" || s.Per10kText() != NotMeasuredText {
		t.Errorf("texts %s %s %s %s", s.CPUText(), s.PerGBText(), s.EmulatorText(), s.Per10kText())
	}
	r := SummarizeUsage([]Usage{{Seconds: 12, Requests: 20000, Processes: []ProcessUsage{p(0.4, 1)}}})
	if *r.CPUPer10kRequests != 0.2 || r.CPUPerGB != nil || r.EmulatorText() != "none" {
		t.Errorf("rate summary %+v", r)
	}
	m := MergeUsage(s, r)
	if *m.CPUSeconds != 3.4 || m.Reps != 3 || m.CPUPerGB != nil || m.CPUPer10kRequests != nil {
		t.Errorf("merged %+v: want 3.4 s over 3 repetitions and no normalization of mixed work", m)
	}
}
