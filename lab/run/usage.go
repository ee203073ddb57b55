package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strait-net/strait/internal/usage"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/report"
)

// usageWindow measures a tool's processes, and the lab's userspace link
// emulator apart, over one measurement.
type usageWindow struct {
	opened time.Time
	kernel bool
	tool   *usage.Window
	emu    *usage.Window
}

// openUsage starts measuring t's processes and the emulator (pid 0: none).
// A process that cannot be read fails the measurement: a cost the report
// shows must have been read.
func openUsage(t tool.Tool, emulatorPID int) (*usageWindow, error) {
	w := &usageWindow{opened: time.Now()}
	var targets []usage.Target
	for _, p := range t.Processes() {
		targets = append(targets, usage.Target{Name: p.Name, Node: p.Node, PID: p.PID})
	}
	w.kernel = len(targets) == 0
	var err error
	if !w.kernel {
		if w.tool, err = usage.Open(targets); err != nil {
			return nil, fmt.Errorf("tool %s usage: %w", t.Name(), err)
		}
	}
	if emulatorPID != 0 {
		if w.emu, err = usage.Open([]usage.Target{{Name: "emulator", Node: "host", PID: emulatorPID}}); err != nil {
			return nil, fmt.Errorf("emulator usage: %w", err)
		}
	}
	return w, nil
}

// close ends the window and records it beside the measurement's result
// file; bytes and requests are the work done in it.
func (w *usageWindow) close(resultPath string, bytes, requests float64) (report.Usage, error) {
	u := report.Usage{Kernel: w.kernel, Bytes: bytes, Requests: requests, Seconds: time.Since(w.opened).Seconds()}
	var errs []error
	if w.tool != nil {
		rs, _, err := w.tool.Close()
		errs = append(errs, err)
		for _, r := range rs {
			u.Processes = append(u.Processes, report.ProcessUsage(r))
		}
	}
	if w.emu != nil {
		rs, _, err := w.emu.Close()
		errs = append(errs, err)
		if len(rs) == 1 {
			e := report.ProcessUsage(rs[0])
			u.Emulator = &e
		}
	}
	if err := errors.Join(errs...); err != nil {
		return u, err
	}
	return u, writeJSON(usagePath(resultPath), u)
}

// usagePath is where a measurement's usage is kept: beside its result
// file in raw/.
func usagePath(result string) string {
	return strings.TrimSuffix(result, filepath.Ext(result)) + ".usage.json"
}

// readUsage reads the usage of each repetition's result file; a run
// written before usage was measured has none, which the report shows as
// "not measured".
func readUsage(results []string) (*report.UsageSummary, error) {
	var reps []report.Usage
	for _, p := range results {
		u, err := readResult[report.Usage](usagePath(p))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		reps = append(reps, *u)
	}
	return report.SummarizeUsage(reps), nil
}
