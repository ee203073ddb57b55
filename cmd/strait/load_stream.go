package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

func init() {
	var (
		cfg      load.StreamConfig
		jsonPath string
	)
	stream := &cobra.Command{
		Use:   "stream",
		Short: "iperf/uperf-like raw TCP: bulk throughput or request/response rate against a stream-server",
		Long: `Without --rr: open --parallel TCP connections to a 'strait load stream-server'
and send for --duration on each (--reverse: the server sends), then print
Gbit/s per stream and in total, as the receiver saw it, and the sender's
retransmits from TCP_INFO.

With --rr SIZE: ping-pong SIZE-byte requests and SIZE-byte responses on each
connection for --duration, one transaction at a time, and print
transactions/s and round-trip latency percentiles.

--cc sets the TCP congestion control on both ends' sockets; the one in use
on the sender is printed.`,
		Example: `  strait load stream --server 10.0.1.2:5201 --parallel 4 --duration 10s
  strait load stream --server 10.0.1.2:5201 --reverse --cc bbr --json stream.json
  strait load stream --server 10.0.1.2:5201 --rr 1024 --duration 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			res, runErr := load.RunStream(cmd.Context(), cfg)
			if res == nil {
				return runErr
			}
			printStream(cmd.OutOrStdout(), res)
			if jsonPath != "" {
				if err := writeFile(jsonPath, res.WriteJSON); err != nil {
					return errors.Join(runErr, err)
				}
			}
			return runErr
		},
	}
	f := stream.Flags()
	f.StringVar(&cfg.Server, "server", load.DefaultStreamServer, "stream-server address, host:port")
	f.IntVar(&cfg.Parallel, "parallel", 1, "connections (streams) at once")
	f.DurationVar(&cfg.Duration, "duration", load.DefaultStreamDuration, "how long each connection sends or ping-pongs")
	f.BoolVar(&cfg.Reverse, "reverse", false, "the server sends (bulk only)")
	f.IntVar(&cfg.RR, "rr", 0, "request/response with messages of this many bytes each way (e.g. 64, 1024, 8192); 0: bulk")
	f.StringVar(&cfg.CC, "cc", "", "TCP congestion control for both ends (default: each host's)")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", load.DefaultConnectTimeout, "limit for connecting and the handshake")
	f.StringVar(&jsonPath, "json", "", `write the result as JSON to this file ("-": stdout)`)
	loadCmd.AddCommand(stream)

	var scfg load.StreamServerConfig
	server := &cobra.Command{
		Use:   "stream-server",
		Short: "Serve 'strait load stream' tests (bulk both ways and request/response) until stopped",
		Long: `A TCP server for 'strait load stream'. Each connection starts with a
36-byte handshake that names the test (see package load for the wire
format); anything else is answered with a rejection and closed. Tests are
bounded by the duration they declare plus --grace, connections by
--max-conns.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scfg.Logger = logger()
			srv, err := load.ListenStream(cmd.Context(), scfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "strait load stream-server listening on %s\n", srv.Addr())
			return srv.Run(cmd.Context())
		},
	}
	sf := server.Flags()
	sf.StringVar(&scfg.Listen, "listen", load.DefaultStreamListen, "TCP address to listen on, host:port")
	sf.IntVar(&scfg.MaxConns, "max-conns", load.DefaultStreamMaxConns, "connections served at once; more are closed")
	sf.DurationVar(&scfg.HandshakeTimeout, "handshake-timeout", load.DefaultHandshakeTimeout, "limit for receiving the handshake")
	sf.DurationVar(&scfg.Grace, "grace", load.DefaultStreamGrace, "drop a test that outlives its declared duration by this much")
	loadCmd.AddCommand(server)
}

func printStream(w io.Writer, r *load.StreamResult) {
	fmt.Fprintf(w, "%s %s, %d stream(s), %gs, cc %s\n", r.Mode, r.Direction, r.Parallel, r.DurationSec, r.CC)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	if r.Mode == "rr" {
		t := report.Table{Header: []string{"stream", "transactions", "trans_s", "server_transactions", "seconds", "retransmits"}}
		for i, s := range r.Streams {
			t.Add(strconv.Itoa(i+1), i64(s.Transactions), strconv.FormatFloat(s.TPS, 'f', 1, 64), i64(s.ServerTransactions), f3(s.Seconds), i64(s.Retransmits))
		}
		t.Add("sum", i64(r.Transactions), strconv.FormatFloat(r.TPS, 'f', 1, 64), i64(r.ServerTransactions), f3(r.ElapsedSec), i64(r.Retransmits))
		_, _ = t.WriteTo(w)
		if r.Latency != nil {
			fmt.Fprintln(w)
			p := report.Table{Header: percentileHeader("")}
			p.Add(percentileRow(fmt.Sprintf("rtt_%dB", r.MessageSize), *r.Latency)...)
			_, _ = p.WriteTo(w)
		}
		return
	}
	t := report.Table{Header: []string{"stream", "bytes", "seconds", "gbit_s", "retransmits"}}
	for i, s := range r.Streams {
		t.Add(strconv.Itoa(i+1), i64(s.Bytes), f3(s.Seconds), f3(s.Gbps), i64(s.Retransmits))
	}
	t.Add("sum", i64(r.Bytes), f3(r.ElapsedSec), f3(r.Gbps), i64(r.Retransmits))
	_, _ = t.WriteTo(w)
}
