package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// throughputPath is the raw file of one run (from 1) of a cell in a
// repetition. The first run's name has no run number, as before runs
// existed; every name ends in "-r<rep>." as dropToolFiles expects.
func throughputPath(dir string, c report.ThroughputCell, rep, run int) string {
	kind := "stream"
	if c.RR > 0 {
		kind = fmt.Sprintf("rr%d", c.RR)
	}
	name := fmt.Sprintf("%s-%s-%s-x%d", c.Scenario, c.Tool, kind, c.Streams)
	if run > 1 {
		name += fmt.Sprintf("-run%d", run)
	}
	return filepath.Join(dir, "raw", fmt.Sprintf("%s-r%d.json", name, rep))
}

// cells lists the stream cells of one scenario and tool: bulk
// for every stream count, then rr for every message size and count.
func (tp *Throughput) cells(scenario, tool string) []report.ThroughputCell {
	if len(tp.Scenarios) > 0 && !slices.Contains(tp.Scenarios, scenario) {
		return nil
	}
	var cells []report.ThroughputCell
	for _, rr := range append([]int{0}, tp.RR...) {
		for _, n := range tp.Streams {
			cells = append(cells, report.ThroughputCell{Scenario: scenario, Tool: tool, Streams: n, RR: rr})
		}
	}
	return cells
}

// measureThroughput runs `strait load stream` on the client node through the
// tool. The stream server may still be starting, so a refused connection
// is retried briefly; any other failure is the tool's.
func (r *runner) measureThroughput(ctx context.Context, env tool.Env, target string, cell report.ThroughputCell, path string) (*load.StreamResult, error) {
	args := append([]string{r.opts.Binary, "load"}, r.streamArgs(cell, target)...)
	args = append(args, "--json", path+".tmp")
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
		if err != nil {
			return nil, err
		}
		out, err := cmd.CombinedOutput()
		if err == nil {
			res, err := readResult[load.StreamResult](path + ".tmp")
			if err != nil {
				return nil, err
			}
			// Renamed only when complete, so a resumed run never reads half a file.
			return res, os.Rename(path+".tmp", path)
		}
		last = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), "refused") {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, last
}

// streamArgs are `strait load`'s arguments for one cell, without --json:
// the namespace lab and a Backend run the same.
func (r *runner) streamArgs(cell report.ThroughputCell, target string) []string {
	tp := r.e.Throughput
	args := []string{"stream", "--server", target, "--parallel", strconv.Itoa(cell.Streams), "--duration", tp.duration.String()}
	switch {
	case cell.RR > 0:
		args = append(args, "--rr", strconv.Itoa(cell.RR))
	case tp.Reverse:
		args = append(args, "--reverse")
	}
	return args
}

// printThroughput is a throughput cell's progress line.
func (r *runner) printThroughput(u unit, toolName string, c report.ThroughputCell, res *load.StreamResult) {
	if c.RR > 0 {
		r.printf("  %-10s %-9s rr %-5d ×%-3d %10.1f transactions/s\n", u.id(), toolName, c.RR, c.Streams, res.TPS)
		return
	}
	r.printf("  %-10s %-9s stream  ×%-3d %8.3f Gbit/s  (%d retransmits, cc %s)\n", u.id(), toolName, c.Streams, res.Gbps, res.Retransmits, res.CC)
}

// aggregateThroughput reads every finished throughput file.
func (r *runner) aggregateThroughput() ([]report.ThroughputSummary, error) {
	tp := r.e.Throughput
	if tp == nil {
		return nil, nil
	}
	var out []report.ThroughputSummary
	for _, sc := range r.e.scenarios {
		for _, t := range r.e.Tools {
			for _, cell := range tp.cells(sc.Name, t) {
				c := report.ThroughputSummary{ThroughputCell: cell}
				var paths []string
				for rep := 1; rep <= r.e.Repetitions; rep++ {
					for run := 1; run <= tp.Runs; run++ {
						path := throughputPath(r.dir, cell, rep, run)
						res, err := readResult[load.StreamResult](path)
						if errors.Is(err, os.ErrNotExist) {
							continue
						}
						if err != nil {
							return nil, err
						}
						c.Add(res)
						paths = append(paths, path)
					}
				}
				var err error
				if c.Usage, err = readUsage(paths); err != nil {
					return nil, err
				}
				if c.Reps() > 0 {
					out = append(out, c)
				}
			}
		}
	}
	return out, nil
}
