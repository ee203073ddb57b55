package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/multigw"
)

// runMultiGateway runs a failover or aggregate experiment (package
// lab/multigw), which builds its own labs with several gateways per cluster.
func runMultiGateway(cmd *cobra.Command, name, outDir string) error {
	e, err := multigw.Load(name)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	_, err = multigw.Run(cmd.Context(), e, name, multigw.Options{Binary: exe, OutDir: outDir, Out: cmd.OutOrStdout(), Logger: logger()})
	return err
}
