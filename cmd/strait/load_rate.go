package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

func init() {
	var (
		cfg       load.RateConfig
		jsonPath  string
		histPath  string
		ivPath    string
		heapLimit int64
		procs     string
	)
	rate := &cobra.Command{
		Use:   "rate",
		Short: "wrk2-like open loop: a constant request rate, latency corrected for coordinated omission",
		Long: `Send --rate requests per second over --connections keep-alive connections
for --duration after --warmup, as wrk2 does: request i is due at i/rate and
goes to connection i mod connections; a connection still busy with a slow
response sends its due requests as soon as it can. Latency is measured from
the due time (corrected for coordinated omission), so a stalled target shows
as many slow requests, not one; the service time, measured from the actual
send, is printed beside it.

The summary table goes to stdout (milliseconds); --json writes it as JSON
(microseconds), --hist the corrected latency's percentile spectrum in
HdrHistogram's text format (milliseconds, as wrk2 --latency prints it).`,
		Example: `  strait load rate --url http://10.0.1.2:8080/ --rate 10000 --connections 100 --payload 1024 --duration 30s --warmup 5s
  strait load rate --url http://127.0.0.1:8080/ --rate 2000 --json rate.json --hist rate.hgrm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			if err := applyHeapLimit(heapLimit); err != nil {
				return err
			}
			if err := applyProcs(cmd.Context(), procs); err != nil {
				return err
			}
			var ivErr error
			if ivPath != "" {
				if cfg.Interval == 0 {
					return errors.New("--intervals needs --interval")
				}
				f, err := os.Create(ivPath)
				if err != nil {
					return err
				}
				defer f.Close()
				enc := json.NewEncoder(f)
				// One JSON line per slice, written as it ends, so a
				// reader sees a long run's progress.
				cfg.OnInterval = func(iv load.RateInterval) {
					if err := enc.Encode(iv); err != nil && ivErr == nil {
						ivErr = fmt.Errorf("%s: %w", ivPath, err)
					}
				}
			}
			res, runErr := load.RunRate(cmd.Context(), cfg)
			runErr = errors.Join(runErr, ivErr)
			if res == nil {
				return runErr
			}
			printRate(cmd.OutOrStdout(), res)
			if jsonPath != "" {
				if err := writeFile(jsonPath, res.WriteJSON); err != nil {
					return errors.Join(runErr, err)
				}
			}
			if histPath != "" {
				if err := writeFile(histPath, res.WriteHistogram); err != nil {
					return errors.Join(runErr, err)
				}
			}
			return runErr
		},
	}
	f := rate.Flags()
	f.StringVar(&cfg.URL, "url", load.DefaultURL, "target URL (http only)")
	f.StringVar(&cfg.Method, "method", "", "HTTP method (default POST when --payload > 0, else GET)")
	f.IntVar(&cfg.Payload, "payload", 0, "request body size in bytes")
	f.Float64Var(&cfg.Rate, "rate", load.DefaultRate, "target rate in requests/s, over all connections")
	f.IntVar(&cfg.Connections, "connections", load.DefaultConnections, "keep-alive connections, one request in flight on each")
	f.DurationVar(&cfg.Duration, "duration", load.DefaultDuration, "measured window")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "unrecorded time at the same rate before the measured window")
	f.DurationVar(&cfg.Drain, "drain", load.DefaultDrain, "wait this long after the last due request for late ones (the rest count as errors)")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", load.DefaultConnectTimeout, "limit for establishing a connection")
	f.DurationVar(&cfg.ResponseTimeout, "response-timeout", load.DefaultResponseTimeout, "limit for one exchange after connecting")
	f.BoolVar(&cfg.VerifyEcho, "verify-echo", false, "require the response body to equal the request body byte for byte")
	f.StringVar(&jsonPath, "json", "", `write the summary as JSON to this file ("-": stdout)`)
	f.DurationVar(&cfg.Interval, "interval", 0, "with --intervals: slice the measured window into intervals of this length")
	f.StringVar(&ivPath, "intervals", "", "write each --interval's count, errors and corrected percentiles as a JSON line to this file")
	f.StringVar(&histPath, "hist", "", `write the corrected latency's HdrHistogram percentile distribution to this file ("-": stdout)`)
	addHeapLimitFlag(f, &heapLimit)
	addProcsFlag(f, &procs, procsAuto)
	loadCmd.AddCommand(rate)
}

// writeFile creates path ("-" is stdout) and writes to it with write.
func writeFile(path string, write func(io.Writer) error) error {
	if path == "-" {
		return write(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func ms(us int64) string    { return strconv.FormatFloat(float64(us)/1000, 'f', 3, 64) }
func msf(us float64) string { return strconv.FormatFloat(us/1000, 'f', 3, 64) }

func percentileRow(name string, p load.Percentiles) []string {
	row := []string{name, msf(p.Mean)}
	for _, v := range p.Values() {
		row = append(row, ms(v))
	}
	return row
}

func percentileHeader(first string) []string {
	h := []string{first, "mean_ms"}
	for _, l := range load.PercentileLabels {
		h = append(h, l+"_ms")
	}
	return h
}

func printRate(w io.Writer, r *load.RateResult) {
	t := report.Table{Header: []string{"target_rps", "answered_rps", "count", "errors", "unsent", "connections", "duration_s", "elapsed_s"}}
	t.Add(strconv.FormatFloat(r.TargetRate, 'f', -1, 64), strconv.FormatFloat(r.AnsweredRate, 'f', 2, 64),
		strconv.FormatInt(r.Count, 10), strconv.FormatInt(r.Errors, 10), strconv.FormatInt(r.Unsent, 10), strconv.Itoa(r.Connections),
		strconv.FormatFloat(r.DurationSec, 'f', -1, 64), strconv.FormatFloat(r.ElapsedSec, 'f', 3, 64))
	_, _ = t.WriteTo(w)
	fmt.Fprintln(w)
	p := report.Table{Header: percentileHeader("")}
	p.Add(percentileRow("latency", r.Latency)...)
	p.Add(percentileRow("service", r.ServiceTime)...)
	p.Add(percentileRow("send_lag", r.SendLag)...)
	_, _ = p.WriteTo(w)
	fmt.Fprintln(w, "latency: from the intended start (coordinated omission corrected); service: from the actual send")
	if r.Errors > 0 {
		classes := make([]string, 0, len(r.ErrorClasses))
		for c := range r.ErrorClasses {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		fmt.Fprint(w, "errors:")
		for _, c := range classes {
			fmt.Fprintf(w, " %s=%d", c, r.ErrorClasses[c])
		}
		fmt.Fprintf(w, "\nfirst error: %s\n", r.FirstError)
	}
}
