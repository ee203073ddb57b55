//go:build !linux

package emulator

// probeRole is never a child's role here: the probe experiment that starts
// children with one (probe_linux_test.go) runs on Linux only.
func probeRole() bool { return false }
