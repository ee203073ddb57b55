package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/placement"
)

func init() {
	var seed uint64
	var rounds int
	var noPolish bool
	var brokers, clusters, vpcs, k, region int
	var skew float64
	group := group(&cobra.Command{
		Use:    "placement",
		Short:  "Broker placement (RBCM) tools",
		Hidden: true,
	})
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Compare RBCM with the greedy baseline and the LP bound on generated instances",
		Long: `Generate BCM instances (seed 003 §4.2) and print, per instance: the LP
relaxation of Eq. (1) (ΣD/ΣA), the strengthened LP bound, RBCM's max load and
its ratio to the bound, the ratio after rounding+repair only, the greedy
baseline's ratio, how many roundings needed repair, and runtimes. Without
--brokers it runs the standard sizes (10–100 brokers, 10–1000 clusters,
100–10 000 VPCs).`,
		Example: `  strait placement bench
  strait placement bench --brokers 100 --clusters 1000 --vpcs 10000 --k 2 --region 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := placement.Config{Seed: seed, Rounds: rounds, NoPolish: noPolish}
			if err := cfg.Validate(); err != nil {
				return err
			}
			gens := placement.StandardSizes(seed)
			if brokers > 0 {
				gens = []placement.GenConfig{{Brokers: brokers, Clusters: clusters, VPCs: vpcs, K: k,
					CapacitySkew: skew, Region: region, Seed: seed}}
			}
			var rows []placement.Row
			for _, g := range gens {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				r, err := placement.Compare(g, cfg)
				if err != nil {
					return fmt.Errorf("instance %d×%d×%d: %w", g.Brokers, g.Clusters, g.VPCs, err)
				}
				rows = append(rows, r)
			}
			return placement.WriteTable(cmd.OutOrStdout(), rows)
		},
	}
	f := bench.Flags()
	f.Uint64Var(&seed, "seed", 1, "seed of the instances and of the rounding")
	f.IntVar(&rounds, "rounds", 0, "best-of-R roundings (0: 8)")
	f.BoolVar(&noPolish, "no-polish", false, "Algorithm 1 + repair only, no local search")
	f.IntVar(&brokers, "brokers", 0, "one instance with this many brokers (0: the standard sizes)")
	f.IntVar(&clusters, "clusters", 1000, "clusters of the one instance")
	f.IntVar(&vpcs, "vpcs", 10000, "VPCs of the one instance")
	f.IntVar(&k, "k", 3, "max brokers per tenant of the one instance")
	f.IntVar(&region, "region", 0, "clusters per region of the one instance (0: one ring)")
	f.Float64Var(&skew, "skew", 4, "max/min broker capacity of the one instance")
	group.AddCommand(bench)
	rootCmd.AddCommand(group)
}
