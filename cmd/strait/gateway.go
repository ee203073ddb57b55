package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/gateway"
)

func init() {
	var configPath string
	var packetTeardown bool
	var procs string
	gw := &cobra.Command{
		Use:   "gateway --config FILE",
		Short: "Run a cluster's gateway: imports, exports, mTLS sessions to peer gateways",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := gateway.LoadConfig(configPath)
			if err != nil {
				return err
			}
			if err := applyProcs(cmd.Context(), procs); err != nil {
				return err
			}
			cfg.Logger = logger()
			cfg.Packet.TeardownOnExit = cfg.Packet.TeardownOnExit || packetTeardown
			g, err := gateway.New(cfg)
			if err != nil {
				return err
			}
			return g.Run(cmd.Context())
		},
	}
	gw.Flags().StringVar(&configPath, "config", "", "gateway configuration file (YAML)")
	_ = gw.MarkFlagRequired("config")
	// auto: a gateway relaying small requests one at a time pays a
	// second thread's wake-up per packet on more than one P (README,
	// "Workloads and load"); applies take every P while they run
	// (procs.Boost).
	addProcsFlag(gw.Flags(), &procs, procsAuto)
	gw.Flags().BoolVar(&packetTeardown, "packet-teardown", false, "when stopped (SIGTERM, SIGINT), detach the packet mode's programs and remove their pins and VXLAN device; without it they keep forwarding and the next start adopts them (docs/packet.md)")

	var socket string
	socketFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&socket, "gateway", envOr("STRAIT_GATEWAY", gateway.DefaultAdmin), "the gateway's admin socket (env STRAIT_GATEWAY)")
	}
	readFile := func(path string) ([]byte, error) {
		if path == "-" {
			return io.ReadAll(os.Stdin)
		}
		return os.ReadFile(path)
	}
	var file string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace resources (Peer, ServiceExport, ServiceImport, AccessPolicy, Workload) on a running gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readFile(file)
			if err != nil {
				return err
			}
			res, err := gateway.NewAdminClient(socket).Apply(b)
			if err != nil {
				return err
			}
			return printResult(cmd.OutOrStdout(), "applied", res)
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "YAML file with resources (- for stdin)")
	_ = apply.MarkFlagRequired("filename")
	socketFlag(apply)

	del := &cobra.Command{
		Use:   "delete -f FILE",
		Short: "Delete the resources a file names from a running gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readFile(file)
			if err != nil {
				return err
			}
			res, err := gateway.NewAdminClient(socket).Delete(b)
			if err != nil {
				return err
			}
			return printResult(cmd.OutOrStdout(), "deleted", res)
		},
	}
	del.Flags().StringVarP(&file, "filename", "f", "", "YAML file with resources (- for stdin)")
	_ = del.MarkFlagRequired("filename")
	socketFlag(del)

	get := &cobra.Command{
		Use:   "get [KIND]",
		Short: "Print a running gateway's resources as YAML (all, or one kind)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := ""
			if len(args) == 1 {
				kind = args[0]
			}
			b, err := gateway.NewAdminClient(socket).Get(kind)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	socketFlag(get)

	status := &cobra.Command{
		Use:   "status",
		Short: "Print a running gateway's peers, sessions, imports and exports (JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := gateway.NewAdminClient(socket).Status()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	}
	socketFlag(status)
	gw.AddCommand(status)

	rootCmd.AddCommand(gw, apply, del, get)
	gatewayCmd = gw
}

// gatewayCmd is `strait gateway`, the parent of its benchmarks
// (gateway_bench.go, whose init runs after this file's).
var gatewayCmd *cobra.Command

func printResult(w io.Writer, verb string, r gateway.ApplyResult) error {
	fmt.Fprintf(w, "%s: %d changed, %d unchanged\n", verb, r.Changed, r.Unchanged)
	if r.Warning != "" {
		return fmt.Errorf("stored, but not all in effect: %s", r.Warning)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
