package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/broker/syncscale"
)

func init() {
	var configPath string
	cmd := &cobra.Command{
		Use:   "broker --config FILE",
		Short: "Run a broker: clusters' agents publish exports and gateways, and watch the clusterset catalog",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("--config: required (the broker configuration file)")
			}
			cfg, err := broker.LoadConfig(configPath)
			if err != nil {
				return err
			}
			cfg.Logger = logger()
			s, err := broker.New(cfg)
			if err != nil {
				return err
			}
			return s.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "broker configuration file (YAML, see broker/config.go)")
	rootCmd.AddCommand(cmd)
	brokerCmd = cmd
}

// brokerCmd is the parent of `strait broker bench`.
var brokerCmd *cobra.Command

func init() {
	bench := group(&cobra.Command{
		Use:    "bench",
		Short:  "Broker experiments (sync-scale)",
		Hidden: true,
	})
	var (
		clusters, services, batch int
		brokerList                []int
		kill                      bool
		etcdBin, dir, store       string
		poll, timeout             time.Duration
		imports                   bool
	)
	syncScale := &cobra.Command{
		Use:   "sync-scale",
		Short: "Clusters create exports as fast as their gateways accept them; time until every other cluster has them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			needEtcd := store == "etcd"
			for _, b := range brokerList {
				needEtcd = needEtcd || b > 1
			}
			if needEtcd && etcdBin == "" {
				out, err := exec.Command("scripts/k8s-tools.sh").Output()
				if err != nil {
					return fmt.Errorf("--etcd: required for several brokers (or run from the checkout, where scripts/k8s-tools.sh builds it): %v", err)
				}
				etcdBin = filepath.Join(strings.TrimSpace(string(out)), "etcd")
			}
			type run struct {
				brokers int
				kill    bool
			}
			var runs []run
			for _, b := range brokerList {
				runs = append(runs, run{b, false})
			}
			if kill {
				for _, b := range brokerList {
					if b > 1 {
						runs = append(runs, run{b, true})
					}
				}
			}
			var results []syncscale.Result
			for _, r := range runs {
				fmt.Fprintf(cmd.ErrOrStderr(), "sync-scale: %d clusters, %d services, %d broker(s), kill=%v ...\n", clusters, services, r.brokers, r.kill)
				st := store
				if st == "bolt" && r.brokers > 1 {
					st = "etcd"
				}
				runDir := ""
				if dir != "" {
					runDir = filepath.Join(dir, fmt.Sprintf("brokers%d-kill%v", r.brokers, r.kill))
					if err := os.MkdirAll(runDir, 0o755); err != nil {
						return err
					}
				}
				res, err := syncscale.Run(cmd.Context(), syncscale.Config{
					Binary: self, Etcd: etcdBin, Dir: runDir, Clusters: clusters, Services: services, Brokers: r.brokers,
					Store: st, Batch: batch, Kill: r.kill, Poll: poll, Timeout: timeout, Imports: imports, Logger: logger(),
				})
				if err != nil {
					return err
				}
				results = append(results, res)
				syncscale.WriteTable(cmd.OutOrStdout(), []syncscale.Result{res})
			}
			fmt.Fprintln(cmd.OutOrStdout())
			syncscale.WriteTable(cmd.OutOrStdout(), results)
			return nil
		},
	}
	f := syncScale.Flags()
	f.IntVar(&clusters, "clusters", 6, "clusters (a gateway and an agent process each)")
	f.IntVar(&services, "services", 20000, "exported services in total")
	f.IntSliceVar(&brokerList, "brokers", []int{1, 3}, "broker counts to run")
	f.BoolVar(&kill, "kill", true, "also run each multi-broker count with a broker killed mid-run")
	f.StringVar(&store, "store", "", "bolt or etcd (default: bolt for one broker, etcd for several)")
	f.StringVar(&etcdBin, "etcd", "", "etcd binary (default: built by scripts/k8s-tools.sh)")
	f.StringVar(&dir, "dir", "", "keep configs, logs and traces here (default: a removed temp dir)")
	f.IntVar(&batch, "batch", 500, "exports per admin API call")
	f.DurationVar(&poll, "poll", 50*time.Millisecond, "agents' export poll interval")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "give up when not everywhere after this")
	f.BoolVar(&imports, "imports", false, "agents also apply every remote export as an import (a loopback address) to their gateway; report when all are imported, and echo through a sample of every gateway's imports")
	bench.AddCommand(syncScale)
	brokerCmd.AddCommand(bench)
}
