//go:build !linux

// Package parentdeath ties a child process's life to its parent's, so
// that the gateways and servers a benchmark starts do not outlive it when
// it is killed and leave ports and namespaces taken.
package parentdeath

import "os/exec"

// Kill does nothing here: only Linux has PR_SET_PDEATHSIG, so a child
// outlives a parent that is killed, and the parent's own cleanup is all
// there is.
func Kill(*exec.Cmd) {}
