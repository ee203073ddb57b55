package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/linkcheck"
)

func init() {
	probeCmd := &cobra.Command{
		Use:    "probe",
		Short:  "Measuring ends of `strait lab check-link`, run inside the lab's namespaces",
		Hidden: true,
	}

	var listen string
	server := &cobra.Command{
		Use:   "server --listen ADDR:PORT",
		Short: "Answer probes, count floods and sink or source bulk transfers until stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ap, err := netip.ParseAddrPort(listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			_ = raisePriority() // fewer socket-buffer drops when the CPUs are busy
			return linkcheck.Serve(cmd.Context(), linkcheck.ServerConfig{
				Listen: ap, Ready: cmd.OutOrStdout(), Logger: logger(),
			})
		},
	}
	server.Flags().StringVar(&listen, "listen", "0.0.0.0:47470", "UDP and TCP address to listen on")

	var cfg linkcheck.ClientConfig
	var serverAddr string
	client := &cobra.Command{
		Use:   "client --server ADDR:PORT --test rtt|loss|bulk-up|bulk-down",
		Short: "Run one measurement against a probe server and print its report as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ap, err := netip.ParseAddrPort(serverAddr)
			if err != nil {
				return fmt.Errorf("--server: %w", err)
			}
			cfg.Server = ap
			switch {
			case cfg.Count <= 0 || cfg.Count > 1<<26:
				return fmt.Errorf("--count %d: must be between 1 and %d", cfg.Count, 1<<26)
			case cfg.PPS <= 0:
				return fmt.Errorf("--pps %d: must be positive", cfg.PPS)
			case cfg.Size < 48 || cfg.Size > 1400:
				return fmt.Errorf("--size %d: must be between 48 and 1400", cfg.Size)
			}
			_ = raisePriority()
			return linkcheck.RunClient(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	f := client.Flags()
	f.StringVar(&serverAddr, "server", "", "address of the probe server")
	f.StringVar(&cfg.Test, "test", "rtt", "measurement: rtt, loss, bulk-up or bulk-down")
	f.IntVar(&cfg.Count, "count", 1000, "rtt: probes; loss: datagrams per direction")
	f.DurationVar(&cfg.Interval, "interval", 5*time.Millisecond, "rtt: time between probes")
	f.IntVar(&cfg.PPS, "pps", 20000, "loss: datagrams per second per direction")
	f.IntVar(&cfg.Size, "size", 48, "loss: UDP payload bytes")
	f.DurationVar(&cfg.Drain, "drain", time.Second, "rtt, loss: wait this long for late packets")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "bulk: how long to send")
	f.BoolVar(&cfg.Verify, "verify", false, "bulk-up: compare SHA-256 of the bytes sent and received")
	f.StringVar(&cfg.CC, "cc", "", "bulk: TCP congestion control of the sender (default: the namespace's)")
	_ = client.MarkFlagRequired("server")

	probeCmd.AddCommand(server, client)
	labCmd.AddCommand(probeCmd)
}
