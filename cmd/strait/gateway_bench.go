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
		Short: "Apply N imports to a real gateway process and delete them; time, CPU and RSS per import, an echo through a sample, another client's latency meanwhile, what the delete released, per interception mode",
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
	f.DurationVar(&cfg.Pace, "pace", 0, "gap between the keep-alive requests through an import that stays (0: 2ms)")
	f.DurationVar(&cfg.Baseline, "baseline", 0, "how long the keep-alive requests run before the apply, their idle baseline (0: 2s)")
	f.DurationVar(&cfg.Settle, "settle", 0, "after the delete, wait up to this long for the gateway's RSS to come back within 10% of before the imports (0: no wait)")
	f.StringVar(&cfg.Dir, "dir", "", "keep configs and logs here")
	gatewayCmd.AddCommand(cmd)
}
