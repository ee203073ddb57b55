package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/load"
)

func init() {
	var (
		cfg      load.UDPConfig
		jsonPath string
	)
	udp := &cobra.Command{
		Use:   "udp",
		Short: "UDP echo load: datagrams at a fixed rate, sent/received/lost and round-trip percentiles",
		Long: `Send --rate datagrams per second of --size bytes for --duration to a UDP echo
server (strait load udp-server), open loop, spread round-robin over --flows
client sockets (each its own source port, so its own flow through a
gateway). Every echo is checked byte for byte; one without its echo within
--timeout is lost.

Prints sent, received, lost (and late, corrupt, duplicate echoes), the
sending rate (datagrams sent per second, answered or not), and the round trip's IQR mean and percentiles in µs.`,
		Example: `  strait load udp --addr 10.96.0.50:7001 --rate 50000 --duration 10s --size 64 --json udp.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, runErr := load.RunUDP(cmd.Context(), cfg)
			if res == nil {
				return runErr
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "sent %d received %d lost %d (%.3f%%) late %d corrupt %d duplicate %d send-errors %d send rate %.0f/s\n",
				res.Sent, res.Received, res.Lost, res.LossPct, res.Late, res.Corrupt, res.Duplicates, res.SendErrors, res.AchievedRate)
			p := res.Latency
			fmt.Fprintf(w, "rtt µs: iqr-mean %.1f p50 %d p90 %d p99 %d p99.9 %d max %d\n", res.IQRMeanUS, p.P50, p.P90, p.P99, p.P999, p.P100)
			if jsonPath != "" {
				b, err := json.MarshalIndent(res, "", "  ")
				if err == nil {
					err = os.WriteFile(jsonPath, append(b, '\n'), 0o644)
				}
				if err != nil {
					return errors.Join(runErr, err)
				}
			}
			return runErr
		},
	}
	f := udp.Flags()
	f.StringVar(&cfg.Addr, "addr", "", "host:port of the UDP echo server")
	f.IntVar(&cfg.Rate, "rate", 1000, "datagrams per second, all flows together")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&cfg.Size, "size", 64, fmt.Sprintf("datagram size in bytes (%d to 65507)", load.UDPHeaderLen))
	f.IntVar(&cfg.Flows, "flows", 1, "client sockets (source ports)")
	f.DurationVar(&cfg.Timeout, "timeout", time.Second, "a datagram without its echo after this is lost")
	f.StringVar(&jsonPath, "json", "", "write the result as JSON to this file")
	loadCmd.AddCommand(udp)

	var listen string
	server := &cobra.Command{
		Use:   "udp-server",
		Short: "answer strait load udp: echo every datagram to its sender",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ua, err := net.ResolveUDPAddr("udp", listen)
			if err != nil {
				return fmt.Errorf("listen %q: %w", listen, err)
			}
			conn, err := net.ListenUDP("udp", ua)
			if err != nil {
				return err
			}
			_ = conn.SetReadBuffer(4 << 20)
			_ = conn.SetWriteBuffer(4 << 20)
			fmt.Fprintf(cmd.ErrOrStderr(), "strait load udp-server listening on %s\n", conn.LocalAddr())
			return load.ServeUDPEcho(cmd.Context(), conn)
		},
	}
	server.Flags().StringVar(&listen, "listen", ":7001", "UDP address to listen on")
	loadCmd.AddCommand(server)
}
