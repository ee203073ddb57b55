package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/load"
)

func init() {
	var (
		cfg      load.ProbeConfig
		modes    string
		csvPath  string
		jsonPath string
	)
	probe := &cobra.Command{
		Use:   "probe",
		Short: "sequence-numbered probes at a fixed rate, for failover: lost probes ÷ rate = recovery time",
		Long: `Send --rate probes per second for --duration to a probe server (strait load
probe-server) through the interconnect, in each of --modes at once: "new"
opens one TCP connection per probe, "stream" spreads probes round-robin
over --streams long-lived connections (which hash to different gateways).
A probe without its echo within --timeout is lost.

Prints per mode: sent, lost, recovery = lost ÷ rate (0.5 ms resolution),
the longest run of consecutive lost probes, and for stream mode the lost
probes per connection. --csv writes one row per probe.`,
		Example: `  strait load probe --addr 10.96.0.50:7000 --rate 2000 --duration 20s --csv probes.csv`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Modes = strings.Split(modes, ",")
			samples, runErr := load.RunProbe(cmd.Context(), cfg)
			if runErr != nil && samples == nil {
				return runErr
			}
			if csvPath != "" {
				f, err := os.Create(csvPath)
				if err != nil {
					return errors.Join(runErr, err)
				}
				err = load.WriteProbeCSV(f, samples)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return errors.Join(runErr, err)
				}
			}
			sums := load.SummarizeProbes(samples, cfg.Rate)
			w := cmd.OutOrStdout()
			for _, s := range sums {
				fmt.Fprintf(w, "%-6s sent %d lost %d recovery %v longest-gap %v\n", s.Mode, s.Sent, s.Lost, s.Recovery, s.LongestGap)
				conns := make([]string, 0, len(s.LostByConn))
				for c := range s.LostByConn {
					conns = append(conns, c)
				}
				sort.Strings(conns)
				for _, c := range conns {
					fmt.Fprintf(w, "       conn %s lost %d\n", c, s.LostByConn[c])
				}
			}
			if jsonPath != "" {
				b, err := json.MarshalIndent(sums, "", "  ")
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
	f := probe.Flags()
	f.StringVar(&cfg.Addr, "addr", "", "host:port of the probe server")
	f.StringVar(&modes, "modes", "new,stream", "new, stream or new,stream")
	f.IntVar(&cfg.Rate, "rate", 2000, "probes per second per mode")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&cfg.Streams, "streams", 8, "long-lived connections in stream mode")
	f.DurationVar(&cfg.Timeout, "timeout", time.Second, "a probe without a reply after this is lost")
	f.StringVar(&csvPath, "csv", "", "write one row per probe to this file")
	f.StringVar(&jsonPath, "json", "", "write the summaries as JSON to this file")
	f.DurationVar(&cfg.NewPauseAt, "new-pause-at", 0, "send no new-connection probes from this long after the start ...")
	f.DurationVar(&cfg.NewPauseFor, "new-pause-for", 0, "... for this long (0: no pause)")
	loadCmd.AddCommand(probe)

	var listen string
	server := &cobra.Command{
		Use:   "probe-server",
		Short: "answer strait load probe: echo every probe on its connection",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "strait load probe-server listening on %s\n", ln.Addr())
			return load.ServeProbes(cmd.Context(), ln)
		},
	}
	server.Flags().StringVar(&listen, "listen", ":7000", "TCP address to listen on")
	loadCmd.AddCommand(server)
}
