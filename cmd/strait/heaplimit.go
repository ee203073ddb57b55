package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// defaultHeapLimit is where the lab's workload servers and its open-loop
// load generator collect garbage. A collection's pauses and CPU burst hold
// up the requests behind it; on a host whose CPUs the tool under test
// shares, the backlog drains only as fast as the CPU the tools leave, so it
// showed in every tool's tail, and most in the tools that use the most CPU
// (README, "What the cell asks of this host"): with net/http's 2.5 KB per
// request and Go's default (GOGC=100), an echo server collected every 0.2 s
// at seed 002's 10 000 requests/s. The servers now allocate nothing per
// request, but large bodies and the load generator's records still do; at
// this limit a 1 MB echo over 64 connections fits without a collection.
const defaultHeapLimit = 512 << 20

func addHeapLimitFlag(f *pflag.FlagSet, v *int64) {
	f.Int64Var(v, "heap-limit", defaultHeapLimit,
		"collect garbage only once the heap reaches this many bytes (Go's GOMEMLIMIT with GOGC=off); 0 leaves collection to Go's defaults and GOGC")
}

// applyHeapLimit sets the process's garbage collection as --heap-limit asks.
func applyHeapLimit(v int64) error {
	if v < 0 {
		return fmt.Errorf("--heap-limit %d: must not be negative", v)
	}
	if v > 0 {
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(v)
	}
	return nil
}
