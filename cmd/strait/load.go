package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

func init() {
	var (
		cfg       load.SeqConfig
		keepAlive bool
		csvPath   string
		quiet     bool
	)
	seq := &cobra.Command{
		Use:   "seq",
		Short: "JMeter-like closed loop: N sequential requests per thread, one row per request",
		Long: `Send --requests requests one after the other from each of --threads threads,
each waiting for its response (and --think) before the next, as the seed
papers' JMeter tests do. Every request becomes a CSV row (see package load
for the columns); failed requests are rows with an error, and the loop goes
on. A summary table goes to stderr.

Request bodies are --payload pseudo-random bytes, different for every
request; --verify-echo checks that the response body is the same bytes.`,
		Example: `  strait load seq --url http://10.0.1.2:8080/ --payload 1024 --requests 20 --verify-echo --csv run.csv
  strait load seq --url http://10.0.1.2:8080/ --requests 40 --keepalive=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DisableKeepAlive = !keepAlive
			if err := cfg.Validate(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if csvPath != "" && csvPath != "-" {
				f, err := os.Create(csvPath)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			samples, runErr := load.RunSeq(cmd.Context(), cfg)
			// Write what was measured even when interrupted.
			if err := load.WriteCSV(out, samples); err != nil {
				return errors.Join(runErr, err)
			}
			if f, ok := out.(*os.File); ok && f != os.Stdout {
				if err := f.Close(); err != nil {
					return errors.Join(runErr, fmt.Errorf("close %s: %w", csvPath, err))
				}
			}
			if !quiet {
				printSummary(cmd.ErrOrStderr(), samples)
			}
			return runErr
		},
	}
	f := seq.Flags()
	f.StringVar(&cfg.URL, "url", load.DefaultURL, "target URL (http only)")
	f.StringVar(&cfg.Method, "method", "", "HTTP method (default POST when --payload > 0, else GET)")
	f.IntVar(&cfg.Payload, "payload", 0, "request body size in bytes")
	f.IntVar(&cfg.Requests, "requests", 1, "measured requests per thread")
	f.DurationVar(&cfg.Duration, "duration", 0, "keep each thread sending until this long after its first measured request (--requests is then the least it sends)")
	f.IntVar(&cfg.Threads, "threads", 1, "concurrent threads")
	f.IntVar(&cfg.Warmup, "warmup", 0, "unrecorded requests per thread before the measured ones")
	f.BoolVar(&keepAlive, "keepalive", true, "reuse one connection per thread (false: connect for every request)")
	f.DurationVar(&cfg.ThinkTime, "think", 0, "pause between a response and the thread's next request")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", load.DefaultConnectTimeout, "limit for establishing a connection")
	f.DurationVar(&cfg.ResponseTimeout, "response-timeout", load.DefaultResponseTimeout, "limit for the exchange after connecting, request to last body byte")
	f.BoolVar(&cfg.VerifyEcho, "verify-echo", false, "require the response body to equal the request body byte for byte")
	f.StringVar(&csvPath, "csv", "", "write the samples to this file (default stdout)")
	f.BoolVarP(&quiet, "quiet", "q", false, "do not print the summary table to stderr")
	loadCmd.AddCommand(seq)
}

func printSummary(w io.Writer, samples []load.Sample) {
	t := report.Table{Header: report.SummaryHeader()}
	t.Add(report.Summarize(samples).Cells()...)
	_, _ = t.WriteTo(w)
	for _, s := range samples {
		if !s.OK() {
			fmt.Fprintf(w, "first error: thread %d seq %d: %s\n", s.Thread, s.Seq, s.Err)
			break
		}
	}
}
