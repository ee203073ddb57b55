package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/linkcheck"
	"github.com/strait-net/strait/lab/multigw"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/topology"
)

func init() {
	var opts run.Options
	var over run.Overrides
	var clustersFile string
	runCmd := &cobra.Command{
		Use:   "run EXPERIMENT",
		Short: "Run an experiment file (or a built-in experiment by name) and write its results",
		Long: "Run an experiment: for every scenario and repetition, build a fresh lab, start the\n" +
			"workloads, drive the load through every tool, record every request, tear down.\n" +
			"Built-in experiments: " + strings.Join(append(run.Builtins(), multigw.Builtins()...), ", ") + ".",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Parallel < 0 {
				return fmt.Errorf("--parallel %d: must not be negative", opts.Parallel)
			}
			if multigw.IsBuiltin(args[0]) || multigw.IsFile(args[0]) {
				// Its labs are generated and it has no cells, so these
				// flags would be ignored without a word.
				for _, flag := range []string{"resume", "parallel", "scenarios", "tools", "workloads", "payloads", "repetitions", "requests", "duration", "compose-path", "cpu-latency"} {
					if cmd.Flags().Changed(flag) {
						return fmt.Errorf("--%s: does not apply to %s, a multi-gateway experiment (only --out and --emulator do)", flag, args[0])
					}
				}
				if clustersFile != "" {
					return fmt.Errorf("--clusters: %s is a multi-gateway experiment, which runs in the namespace lab only", args[0])
				}
				return runMultiGateway(cmd, args[0], opts.OutDir, opts.Emulator)
			}
			e, err := run.LoadExperiment(args[0])
			if err != nil {
				return err
			}
			if err := e.Override(over); err != nil {
				return err
			}
			opts.Out = cmd.OutOrStdout()
			opts.Logger = logger()
			opts.Version = version
			if clustersFile != "" {
				if cmd.Flags().Changed("emulator") {
					return errors.New("--emulator: the namespace lab's emulation backend; runs on clusters (--clusters) emulate links with their own")
				}
				if opts.Backend, err = clusterBackend(clustersFile); err != nil {
					return err
				}
			}
			_, err = run.Run(cmd.Context(), e, opts)
			return err
		},
	}
	runCmd.Flags().StringVar(&opts.OutDir, "out", "results", "directory for run directories")
	runCmd.Flags().StringVar(&clustersFile, "clusters", "", "run on Kubernetes clusters: a file mapping the experiment's clusters to kubeconfig contexts (docs/lab-clusters.md)")
	runCmd.Flags().StringVar(&opts.Resume, "resume", "", "finish an interrupted run: its directory (finished units are not redone)")
	runCmd.Flags().IntVar(&opts.Parallel, "parallel", 0, "units (scenario × repetition) measured at once, each in its own lab (0: the experiment's setting)")
	runCmd.Flags().StringVar(&opts.Emulator, "emulator", "", "emulation backend: auto, netem, userspace or tbf (rate-only links)")
	runCmd.Flags().StringSliceVar(&over.Scenarios, "scenarios", nil, "run only these scenarios (comma-separated)")
	runCmd.Flags().StringSliceVar(&over.Tools, "tools", nil, "compare these tools instead")
	runCmd.Flags().StringSliceVar(&over.Workloads, "workloads", nil, "run only these workloads")
	runCmd.Flags().StringSliceVar(&over.Payloads, "payloads", nil, "payload sizes for the workloads that take a body (e.g. 60,1MB)")
	runCmd.Flags().IntVar(&over.Repetitions, "repetitions", 0, "repetitions instead of the experiment's")
	runCmd.Flags().IntVar(&over.Requests, "requests", 0, "requests per cell and repetition instead of the experiment's")
	runCmd.Flags().StringVar(&over.Duration, "duration", "", "length of the experiment's soak instead of its own (e.g. 60m)")
	runCmd.Flags().StringVar(&over.CPULatency, "cpu-latency", "", "hold the host's CPU latency QoS at this wake-up latency while measuring, e.g. 0: idle CPUs poll instead of halting; host: leave it (README, \"CPU idle states\")")
	runCmd.Flags().BoolVar(&over.ComposePath, "compose-path", false, "impair each scenario's path as runs on clusters do: its LAN, WAN and LAN composed into one impairment per direction on the WAN link, clean LANs (docs/lab-clusters.md)")

	scenarios := &cobra.Command{
		Use:   "scenarios",
		Short: "List the built-in scenario catalogs (seed 000 Table IV, seed 001 Table 2)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CATALOG\tSCENARIO\tLAN LINKS (each direction)\tWAN LINKS (each direction)")
			for _, c := range scenario.Catalogs() {
				list, err := scenario.Catalog(c)
				if err != nil {
					return err
				}
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c, s.Name, s.LAN, s.WAN)
				}
			}
			return tw.Flush()
		},
	}

	var check struct {
		forward, reverse, emulator string
		probes, lossPackets        int
		bulk                       time.Duration
	}
	checkLink := &cobra.Command{
		Use:   "check-link",
		Short: "Measure an emulated link against its target: RTT, jitter, loss, throughput",
		Long: `Build a two-node lab joined by one emulated link, then measure it with
µs-resolution UDP probes, a UDP flood for loss and a bulk TCP transfer, and
print target against measured values.

  strait lab check-link --emulation delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fwd, err := emulation.ParseFlag(check.forward)
			if err != nil {
				return fmt.Errorf("--emulation: %w", err)
			}
			rev := fwd
			if check.reverse != "" {
				if rev, err = emulation.ParseFlag(check.reverse); err != nil {
					return fmt.Errorf("--reverse: %w", err)
				}
			}
			plan, err := checkLinkPlan(fwd, rev)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			lopts := lab.Options{Binary: exe, Emulator: check.emulator, Logger: logger()}
			l, err := lab.Up(cmd.Context(), plan, lopts)
			if err != nil {
				return err
			}
			// Teardown must run even after Ctrl-C cancelled the command's
			// context, or the two namespaces and the emulator stay behind.
			defer lab.Down(context.WithoutCancel(cmd.Context()), plan.Name, lopts)
			a, _ := plan.Node("a/a")
			b, _ := plan.Node("b/b")
			fmt.Fprintf(cmd.OutOrStdout(), "link a→b: %s\nlink b→a: %s\nemulation backend: %s\n\n", fwd, rev, l.Backend)
			res, err := linkcheck.Run(cmd.Context(), linkcheck.Config{
				Binary: exe, ClientNetns: a.Netns, ServerNetns: b.Netns, ServerAddr: b.Addr,
				AtoB: fwd, BtoA: rev, Probes: check.probes, LossPackets: check.lossPackets, Bulk: check.bulk,
				Logger: logger(),
			})
			if err != nil {
				return err
			}
			res.Table(cmd.OutOrStdout())
			return nil
		},
	}
	checkLink.Flags().StringVar(&check.forward, "emulation", "delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit", "impairment of the link (both directions unless --reverse is given)")
	checkLink.Flags().StringVar(&check.reverse, "reverse", "", "impairment of the reverse direction, if different")
	checkLink.Flags().StringVar(&check.emulator, "emulator", "", "emulation backend: auto, netem, userspace or tbf (rate-only links)")
	checkLink.Flags().IntVar(&check.probes, "probes", 0, "RTT probes (0: default)")
	checkLink.Flags().IntVar(&check.lossPackets, "loss-packets", 0, "packets per direction for the loss measurement (0: default, at least 200000)")
	checkLink.Flags().DurationVar(&check.bulk, "bulk", 0, "duration of the bulk TCP transfer (0: default)")

	labCmd.AddCommand(runCmd, scenarios, checkLink)
}

// checkLinkPlan is the smallest lab with one WAN link: two clusters of one
// node each, so the link measured is the only link on the path.
func checkLinkPlan(fwd, rev emulation.Params) (*topology.Plan, error) {
	topo, err := topology.Parse([]byte(`
name: chk
clusters:
  - {name: a, nodes: [{name: a}]}
  - {name: b, nodes: [{name: b}]}
wan:
  - between: [a, b]
`))
	if err != nil {
		return nil, err
	}
	plan, err := topo.Plan()
	if err != nil {
		return nil, err
	}
	plan.Links[0].AtoB, plan.Links[0].BtoA = fwd, rev
	return plan, nil
}
