package main

import (
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/gateway/streambench"
)

func init() {
	var (
		cfg    streambench.Config
		prefix string
	)
	cmd := &cobra.Command{
		Use:   "bench-streams",
		Short: "Hold N connections through a real gateway pair (idle and echoing); memory, fds and goroutines per stream, new-connection rate beside direct, floods and stalled readers",
		Long: `Starts two gateway processes on loopback (one importing, one exporting to
echo servers in this process) and holds --idle connections idle after one
echo and --active ones echoing 1 KiB every --interval. Reports the gateways'
RSS, Go heap, descriptors and goroutines per stream, the echo latency, and
the new-connection rate through the gateways beside direct. --flood opens
connections past the held ones (set --max-streams to idle+active+stalled to see them
refused); --stalled opens clients that write and never read; --udp-flood
floods a UDP import while the active connections and a UDP echo on
another import are measured. RLIMIT_NOFILE
is raised as the connections need (the hard limit only as root).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Logger = logger()
			if cfg.Binary == "" {
				cfg.Binary = self
			}
			if prefix != "" {
				if cfg.Prefix, err = netip.ParsePrefix(prefix); err != nil {
					return err
				}
			}
			r, err := streambench.Run(cmd.Context(), cfg)
			streambench.WriteTable(cmd.OutOrStdout(), r)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Idle, "idle", 5000, "connections held idle after one echo")
	f.IntVar(&cfg.Active, "active", 5000, "connections echoing 1 KiB every --interval")
	f.DurationVar(&cfg.Interval, "interval", 0, "pause between an active connection's echoes (0: 1s)")
	f.DurationVar(&cfg.Hold, "hold", 0, "how long the active connections echo before measuring, and each abuse lasts (0: 3s)")
	f.IntVar(&cfg.MaxStreams, "max-streams", 0, "the gateways' max-streams (0: their default, from RLIMIT_NOFILE)")
	f.IntVar(&cfg.Flood, "flood", 0, "workers opening connections past the held ones for --hold (0: no flood)")
	f.IntVar(&cfg.Stalled, "stalled", 0, "clients that write until blocked and never read")
	f.IntVar(&cfg.UDPFlood, "udp-flood", 0, "client sockets flooding a UDP import for --hold after the active phase, a UDP echo measured beside (0: no UDP flood)")
	f.IntVar(&cfg.UDPFloodRate, "udp-flood-rate", 0, "datagrams/s of all --udp-flood sockets together (0: as fast as they can)")
	f.IntVar(&cfg.UDPImportRate, "udp-import-rate", 0, "the gateways' udp.import-rate, datagrams/s read from one import address (0: their default, 200000)")
	f.DurationVar(&cfg.UDPIdle, "udp-idle", 0, "the gateways' UDP flow idle timeout (0: their default, 30s)")
	f.IntVar(&cfg.RateWorkers, "rate-workers", 8, "workers of the new-connection rate test")
	f.DurationVar(&cfg.RateTime, "rate-time", 0, "length of each rate test, direct and through the gateways (0: 2s)")
	f.IntVar(&cfg.PerImport, "per-import", 10000, "connections per import and echo server (ephemeral ports)")
	f.StringVar(&prefix, "prefix", "127.62.0.0/24", "import addresses (one per --per-import connections; loopback needs no setup)")
	f.DurationVar(&cfg.Settle, "settle", 0, "after closing, wait up to this long for the gateways' RSS to come back within 10% plus --settle-per-stream (0: no wait)")
	f.IntVar(&cfg.SettlePerStream, "settle-per-stream", 0, "bytes per connection held at the peak that --settle allows above 10% of the start")
	f.StringVar(&cfg.Dir, "dir", "", "keep configs and logs here")
	f.StringVar(&cfg.Binary, "binary", "", "strait binary the gateways and echo servers run (\"\": this one), e.g. an older build to compare")
	gatewayCmd.AddCommand(cmd)

	var listen string
	echo := &cobra.Command{
		Use:    "bench-streams-echo",
		Short:  "The echo server bench-streams runs in processes of its own",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return streambench.ServeEcho(cmd.Context(), listen)
		},
	}
	echo.Flags().StringVar(&listen, "listen", "", "address to echo on")
	gatewayCmd.AddCommand(echo)
}
