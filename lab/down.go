package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down removes everything lab name created: the emulator daemon, every
// process still running in its namespaces, the namespaces (and with them
// their devices) and the state directory. It works from the state directory
// when there is one and from names alone when there is not, so it also
// cleans up after a crashed `lab up` or `lab run`. Down of a lab that does
// not exist does nothing.
func Down(ctx context.Context, name string, opts Options) error {
	if err := ValidName(name); err != nil {
		return err
	}
	dir := filepath.Join(opts.stateDir(), name)
	var errs []error
	// The daemon goes first: with its TUN devices gone, nothing else holds
	// the namespaces' links.
	for _, pid := range emulatorPIDs(dir) {
		stopProcess(pid)
	}
	if opts.KeepEmulatorLog != "" {
		if err := keepFile(filepath.Join(dir, emulatorLog), opts.KeepEmulatorLog); err != nil {
			errs = append(errs, fmt.Errorf("keep the emulator's log: %w", err))
		}
	}
	nss, err := namespaces(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if n, ok := labOfNetns(ns); !ok || n != name {
			continue
		}
		if err := removeNetns(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownAll takes down every lab List finds.
func DownAll(ctx context.Context, opts Options) error {
	names, err := List(ctx, opts)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		errs = append(errs, Down(ctx, n, opts))
	}
	return errors.Join(errs...)
}

// namespaces lists the named network namespaces that strait created.
func namespaces(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), NetnsPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// removeNetns stops every process inside ns, then deletes it. Processes get
// SIGTERM and a moment to write their results before SIGKILL.
func removeNetns(ctx context.Context, ns string) error {
	pids := netnsPIDs(ctx, ns)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	waitGone(pids, time.Second)
	for _, pid := range netnsPIDs(ctx, ns) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var err error
	for i := 0; i < 50; i++ {
		if _, err = run(ctx, "ip", "netns", "del", ns); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func netnsPIDs(ctx context.Context, ns string) []int {
	out, _ := run(ctx, "ip", "netns", "pids", ns)
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// emulatorPIDs finds emulator daemons of the lab by their command line,
// which names the lab's config file; the PID in lab.json alone could have
// been reused by an unrelated process after a crash.
func emulatorPIDs(dir string) []int {
	cfg := filepath.Join(dir, emulatorConfig)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 5 && args[1] == "lab" && args[2] == "emulate" && args[len(args)-1] == cfg {
			pids = append(pids, pid)
		}
	}
	return pids
}

func stopProcess(pid int) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone([]int{pid}, 2*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone([]int{pid}, time.Second)
	}
}

// waitGone waits until none of pids exists (zombies count as gone).
func waitGone(pids []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		alive := false
		for _, pid := range pids {
			if processAlive(pid) {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself
	// hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// keepFile copies src to dst; a missing src (a lab that emulated nothing,
// or with kernel qdiscs) is not an error.
func keepFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
