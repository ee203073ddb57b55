package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	reporthtml "github.com/strait-net/strait/report/html"
)

func init() {
	var out string
	var seed uint64
	var resamples int
	cmd := &cobra.Command{
		Use:   "report DIR",
		Short: "Write a run directory's results as one self-contained HTML page",
		Long: `Read a run directory written by "strait lab run" (metadata.json,
requests.csv, and rate.json and throughput.json when measured) and write
one HTML file that opens offline: run metadata, box plots of response time
per scenario and tool for every workload and payload, response time against
payload size, seed 001's Table 3 (IQR mean) with ratios to direct, open-loop
latency percentiles (p50 … p100, mean) and throughput and request/response
rates with ratios to direct, and every cell's statistics with bootstrap
confidence intervals. Cells over their workload's KPI are flagged.`,
		Example: `  strait report results/quickstart-20261122-180731
  strait report results/quickstart-20261122-180731 --out /tmp/quickstart.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := reporthtml.LoadRun(args[0])
			if err != nil {
				return err
			}
			run.Bootstrap.Seed = seed
			run.Bootstrap.Resamples = resamples
			path := out
			if path == "" {
				path = filepath.Join(args[0], "report.html")
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if err := reporthtml.Write(f, run); err != nil {
				return errors.Join(err, f.Close(), os.Remove(path))
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "HTML file to write (default DIR/report.html)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "bootstrap random seed")
	cmd.Flags().IntVar(&resamples, "resamples", 0, "bootstrap resamples (0: 2000)")
	rootCmd.AddCommand(cmd)
}
