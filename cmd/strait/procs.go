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

// --procs values: procsAuto runs Go on one P while the process's load fits
// one CPU and on all of them when it does not (internal/procs says why);
// procsGo leaves Go's default.
const (
	procsAuto = "auto"
	procsGo   = "go"
)

// addProcsFlag adds --procs with def as its default.
func addProcsFlag(f *pflag.FlagSet, v *string, def string) {
	f.StringVar(v, "procs", def,
		`Ps (GOMAXPROCS) for Go code: "auto" runs on one while the process uses less than 0.7 CPU and on all when it uses more; "go" leaves Go's default (the CPUs the process may use); a number fixes them (the GOMAXPROCS environment variable also does)`)
}

// applyProcs sets the process's Ps as --procs asks; for "auto" it adapts
// them until ctx ends.
func applyProcs(ctx context.Context, v string) error {
	if v == procsGo {
		return nil
	}
	if v == procsAuto {
		if os.Getenv("GOMAXPROCS") == "" {
			go procs.Adapt(ctx, procs.Config{Logger: logger()})
		}
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("--procs %q: want %q, %q or a number of at least 1", v, procsAuto, procsGo)
	}
	runtime.GOMAXPROCS(n)
	return nil
}
