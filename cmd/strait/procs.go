package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/strait-net/strait/internal/procs"
)

// procsAuto is --procs's default: one P while the process's load fits one
// CPU, all of them when it does not (internal/procs says why).
const procsAuto = "auto"

func addProcsFlag(f *pflag.FlagSet, v *string) {
	f.StringVar(v, "procs", procsAuto,
		`Ps (GOMAXPROCS) for Go code: "auto" runs on one while the process uses less than 0.7 CPU and on all when it uses more; a number fixes them (the GOMAXPROCS environment variable also does)`)
}

// applyProcs sets the process's Ps as --procs asks; for "auto" it adapts
// them until ctx ends.
func applyProcs(ctx context.Context, v string) error {
	if v == procsAuto {
		if os.Getenv("GOMAXPROCS") == "" {
			go procs.Adapt(ctx, procs.Config{Logger: logger()})
		}
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("--procs %q: want %q or a number of at least 1", v, procsAuto)
	}
	runtime.GOMAXPROCS(n)
	return nil
}
