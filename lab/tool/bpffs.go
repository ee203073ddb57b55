package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// mountPins mounts a bpffs of the tool's own at dir/bpffs and returns its
// path. `ip netns exec` hides /sys/fs/bpf; this mount, seen by the lab's
// namespaces, holds the packet mode's pins and frees them when unmounted.
func mountPins(ctx context.Context, dir string) (string, error) {
	pins := filepath.Join(dir, "bpffs")
	if err := os.MkdirAll(pins, 0o700); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "bpf", "bpf", pins).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mount bpffs on %s: %w: %s", pins, err, strings.TrimSpace(string(out)))
	}
	return pins, nil
}

// unmountPins checks that the gateways' teardown left no pin under pins,
// then unmounts it and removes the mount point. It reports whether pins
// is unmounted (false leaves it to a later call) and what went wrong.
func unmountPins(ctx context.Context, pins string) (bool, error) {
	var errs []error
	if left, _ := os.ReadDir(pins); len(left) > 0 {
		var names []string
		for _, e := range left {
			if e.IsDir() { // bpffs's own files (maps.debug, progs.debug) are not ours
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			errs = append(errs, fmt.Errorf("pins left after teardown: %v", names))
		}
	}
	if out, err := exec.CommandContext(ctx, "umount", pins).CombinedOutput(); err != nil {
		return false, errors.Join(append(errs, fmt.Errorf("umount %s: %w: %s", pins, err, strings.TrimSpace(string(out))))...)
	}
	_ = os.Remove(pins)
	return true, errors.Join(errs...)
}
