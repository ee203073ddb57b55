package main

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/emulator"
)

func init() {
	var configPath string
	cmd := &cobra.Command{
		Use:    "emulate --config FILE",
		Short:  "Run the userspace link emulator for the links in FILE (started by the lab)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := emulator.LoadConfig(configPath)
			if err != nil {
				return err
			}
			// Every direction keeps a locked OS thread that sleeps in
			// nanosleep and holds a P meanwhile; with GOMAXPROCS at the CPU
			// count those threads starved the readers (RTT outliers of
			// 20–35 ms on 2 cores).
			runtime.GOMAXPROCS(runtime.NumCPU() + max(4, 2*len(cfg.Links)))
			log := logger().With("component", "emulator")
			if err := raisePriority(); err != nil {
				log.Warn("emulator runs at normal priority", "err", err)
			}
			cfg.Logger = log
			return emulator.Run(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "emulator configuration (JSON)")
	_ = cmd.MarkFlagRequired("config")
	labCmd.AddCommand(cmd)
}

// raisePriority gives the process a scheduling weight above the programs it
// shares the CPUs with. The emulator stands for the network and the probes
// measure it; when the workloads under test (or anything else) saturate the
// CPUs, a starved emulator adds delay and drops packets the link never
// would. The emulator's own threads already run at nice -10, but with
// autogroup scheduling (kernel.sched_autogroup_enabled) nice only orders
// threads within one session: so the process starts a session of its own
// and raises that session's weight. It is best effort, and needs root.
// The lab starts the emulator as a session leader already (startEmulator),
// where setsid fails with EPERM: the session is its own then.
func raisePriority() error {
	if sid, _ := unix.Getsid(0); sid != os.Getpid() {
		if _, err := unix.Setsid(); err != nil {
			return fmt.Errorf("setsid: %w", err)
		}
	}
	if err := os.WriteFile("/proc/self/autogroup", []byte("-10"), 0); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("autogroup: %w", err)
	}
	return nil
}
