// Package parentdeath ties a child process's life to its parent's, so
// that the gateways and servers a benchmark starts do not outlive it when
// it is killed and leave ports and namespaces taken.
package parentdeath

import (
	"os/exec"
	"syscall"
)

// Kill makes the kernel send cmd's process SIGKILL when the thread that
// started it exits (PR_SET_PDEATHSIG, Linux only). Call it before
// cmd.Start.
func Kill(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
