package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// run executes a command and returns its output; the error carries the
// command line and what it printed, because iproute2's messages are the most
// useful part of a failure.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out.String(), nil
}

// ipBatch runs several ip(8) commands in one namespace with one process;
// lab up issues hundreds of them, and one exec per command would dominate.
func ipBatch(ctx context.Context, netns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Run(); err != nil {
		where := "host"
		if netns != "" {
			where = netns
		}
		return fmt.Errorf("ip batch in %s: %w: %s", where, err, strings.TrimSpace(errb.String()))
	}
	return nil
}
