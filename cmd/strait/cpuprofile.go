package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// STRAIT_CPUPROFILE_DIR makes every strait process (brokers, agents,
// gateways a bench starts) write a CPU profile of its first
// STRAIT_CPUPROFILE_SECS seconds (default 10) there, named by command
// and pid: benchmarks that run many processes are profiled without
// changing how they start them.
func init() {
	dir := os.Getenv("STRAIT_CPUPROFILE_DIR")
	if dir == "" || len(os.Args) < 2 {
		return
	}
	secs, err := strconv.Atoi(os.Getenv("STRAIT_CPUPROFILE_SECS"))
	if err != nil || secs <= 0 {
		secs = 10
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.prof", os.Args[1], os.Getpid())))
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	var once sync.Once
	stop := func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }
	time.AfterFunc(time.Duration(secs)*time.Second, stop)
	// Best effort on SIGTERM, which a bench sends at its end.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; stop() }()
}
