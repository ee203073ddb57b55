package main

import (
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/importbench"
)

func init() {
	var (
		cfg        importbench.Config
		prefix     string
		intercepts []string
	)
	cmd := &cobra.Command{
		Use:   "bench-imports",
		Short: "Apply N imports to a real gateway process; time, CPU and RSS per import, an echo through a sample, per interception mode",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary, cfg.Intercepts, cfg.Logger = self, intercepts, logger()
			if prefix != "" {
				if cfg.Prefix, err = netip.ParsePrefix(prefix); err != nil {
					return err
				}
			}
			rs, err := importbench.Run(cmd.Context(), cfg)
			importbench.WriteTable(cmd.OutOrStdout(), rs)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Imports, "imports", 20000, "imports applied")
	f.IntVar(&cfg.Chunk, "chunk", 4000, "imports per admin call (the agent's)")
	f.IntVar(&cfg.Sample, "sample", 100, "imports dialed (echo) to prove them usable")
	f.StringSliceVar(&intercepts, "intercept", []string{gateway.InterceptSteer, gateway.InterceptListeners}, "modes to run, in order")
	f.StringVar(&prefix, "prefix", "127.60.0.0/16", "import addresses (one each; loopback needs no setup)")
	f.StringVar(&cfg.Dir, "dir", "", "keep configs and logs here")
	gatewayCmd.AddCommand(cmd)
}
