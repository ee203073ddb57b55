//go:build !linux

package packet

// loadavg is unknown here: the benchmarks read it with Linux's sysinfo
// (throughput_linux_test.go).
func loadavg() string { return "?" }
