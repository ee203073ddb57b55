// Package usage measures what a tool's processes cost while the lab
// measures through them: CPU time and peak resident memory of each process
// over one window, read from /proc. A value that cannot be read is an
// error, never a zero: a zero in a report must mean the process used less
// than one clock tick.
package usage

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Target is a process to measure.
type Target struct {
	Name string // what it is, e.g. "gateway"
	Node string // the lab node it runs on
	PID  int
}

// Reading is a process's cost over a window.
type Reading struct {
	Name string `json:"name"`
	Node string `json:"node,omitempty"`
	// CPUSeconds is user and system time, its own and its reaped
	// children's, in the kernel's 10 ms clock ticks.
	CPUSeconds float64 `json:"cpu_seconds"`
	// PeakRSSBytes is the largest resident set within the window (VmHWM,
	// reset when the window opens).
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times; Linux fixes
// it at 100 on every architecture the lab runs on.
const clockTick = 100

// Window is an open measurement.
type Window struct {
	targets []Target
	cpu     []float64
	opened  time.Time
}

// Open resets each target's peak RSS and reads its CPU time so far.
func Open(targets []Target) (*Window, error) {
	w := &Window{targets: targets, opened: time.Now()}
	for _, t := range targets {
		// Writing 5 to clear_refs resets VmHWM to the current RSS
		// (proc(5)), so the peak read at Close is this window's.
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", t.PID), []byte("5"), 0); err != nil {
			return nil, fmt.Errorf("reset peak RSS of %s (pid %d) on %s: %w", t.Name, t.PID, t.Node, err)
		}
		cpu, err := CPUSeconds(t.PID)
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", t.Name, t.Node, err)
		}
		w.cpu = append(w.cpu, cpu)
	}
	return w, nil
}

// Close reads every target's CPU time and peak RSS since Open, and the
// window's length.
func (w *Window) Close() ([]Reading, time.Duration, error) {
	var out []Reading
	var errs []error
	for i, t := range w.targets {
		cpu, err := CPUSeconds(t.PID)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s on %s: %w", t.Name, t.Node, err))
			continue
		}
		peak, err := PeakRSS(t.PID)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s on %s: %w", t.Name, t.Node, err))
			continue
		}
		out = append(out, Reading{Name: t.Name, Node: t.Node, CPUSeconds: round(cpu - w.cpu[i]), PeakRSSBytes: peak})
	}
	return out, time.Since(w.opened), errors.Join(errs...)
}

// round keeps the tick resolution and drops float noise (0.30000000004).
func round(s float64) float64 { return float64(int64(s*clockTick+0.5)) / clockTick }

// CPUSeconds is utime+stime+cutime+cstime of pid.
func CPUSeconds(pid int) (float64, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	ticks, err := ParseStat(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return float64(ticks) / clockTick, nil
}

// ParseStat returns the CPU clock ticks (utime, stime, cutime, cstime
// summed) of a /proc/<pid>/stat line. The command name in parentheses may
// hold spaces and parentheses itself, so fields count from the last ')'.
func ParseStat(b []byte) (uint64, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no ')' closing the command name")
	}
	// After ") ": state is field 3; utime..cstime are fields 14–17.
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 15", len(f))
	}
	var sum uint64
	for k, name := range []string{"utime", "stime", "cutime", "cstime"} {
		v, err := strconv.ParseUint(f[11+k], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("%s %q: want a count of clock ticks", name, f[11+k])
		}
		if sum+v < sum || sum+v > 1<<62 {
			return 0, fmt.Errorf("%s %d: sum overflows", name, v)
		}
		sum += v
	}
	return sum, nil
}

// PeakRSS is VmHWM of pid in bytes.
func PeakRSS(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := ParseStatus(b, "VmHWM")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// RSS is VmRSS of pid in bytes: what it holds now.
func RSS(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := ParseStatus(b, "VmRSS")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseStatus returns a "Key:  123 kB" field of /proc/<pid>/status in
// bytes.
func ParseStatus(b []byte, key string) (int64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(strings.TrimSpace(v), " kB")
		if !ok {
			return 0, fmt.Errorf("%s %q: want a size in kB", key, strings.TrimSpace(v))
		}
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("%s %q: want a size in kB", key, strings.TrimSpace(v))
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line", key)
}
