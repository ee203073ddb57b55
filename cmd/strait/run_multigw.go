package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/multigw"
)

// runMultiGateway runs a failover or aggregate experiment (package
// lab/multigw), which builds its own labs with several gateways per cluster.
// A non-empty emulator replaces the experiment's.
func runMultiGateway(cmd *cobra.Command, name, outDir, emulator string) error {
	e, err := multigw.Load(name)
	if err != nil {
		return err
	}
	if emulator != "" {
		e.Emulator = emulator
		if err := e.Validate(); err != nil {
			return fmt.Errorf("--emulator: %w", err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	_, err = multigw.Run(cmd.Context(), e, name, multigw.Options{Binary: exe, OutDir: outDir, Out: cmd.OutOrStdout(), Logger: logger()})
	return err
}
