package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/hostnoise"
)

func init() {
	var cfg hostnoise.Config
	var jsonPath string
	cmd := &cobra.Command{
		Use:   "host-noise",
		Short: "Measure how late this host wakes a thread on each CPU: is it quiet enough for tail latencies?",
		Long: `Pin a probe thread to each CPU, wake it every --interval on the kernel's
high-resolution timer for --duration, and count the wake-ups later than
--late. Every process on a lab path is woken like this for each request it
passes on, so a host whose CPUs are held for milliseconds (kernel threads,
other guests of the hypervisor) puts those milliseconds into every tool's
tail percentiles, more for a path of more processes (README, "Keep-alive
request/response"). Run it alone before measuring, and beside a run to see
what the run's own load adds.`,
		Example: `  strait lab host-noise --duration 10s
  strait lab host-noise --late 500us --json noise.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := hostnoise.Measure(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := res.Table(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonPath == "" {
				return nil
			}
			b, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				return err
			}
			return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", hostnoise.DefaultDuration, "how long to measure")
	f.DurationVar(&cfg.Interval, "interval", hostnoise.DefaultInterval, fmt.Sprintf("time between a probe's wake-ups (at least %v)", hostnoise.MinInterval))
	f.DurationVar(&cfg.Late, "late", hostnoise.DefaultLate, "a wake-up later than this counts as late")
	f.IntSliceVar(&cfg.CPUs, "cpus", nil, "CPUs to probe (default: every CPU this process may run on)")
	f.StringVar(&jsonPath, "json", "", "also write the result as JSON to this file")
	labCmd.AddCommand(cmd)
}
