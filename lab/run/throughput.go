package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/load"
)

// ThroughputCell identifies one throughput measurement.
type ThroughputCell struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Streams  int    `json:"streams"`
}

// ThroughputResult summarizes a cell over its repetitions.
type ThroughputResult struct {
	ThroughputCell
	Gbps        []float64 `json:"gbit_s"` // one per repetition
	MeanGbps    float64   `json:"mean_gbit_s"`
	Retransmits int64     `json:"retransmits"`
	CC          string    `json:"cc"`
}

func throughputPath(dir string, c ThroughputCell, rep int) string {
	return filepath.Join(dir, "raw", fmt.Sprintf("%s-%s-stream-x%d-r%d.json", c.Scenario, c.Tool, c.Streams, rep))
}

// measureThroughput runs `strait load stream` on the client node through the
// tool. The stream server may still be starting, so a refused connection
// is retried briefly; any other failure is the tool's.
func (r *runner) measureThroughput(ctx context.Context, env tool.Env, target string, cell ThroughputCell, rep int) (*load.StreamResult, error) {
	tp := r.e.Throughput
	path := throughputPath(r.dir, cell, rep)
	args := []string{r.opts.Binary, "load", "stream", "--server", target,
		"--parallel", strconv.Itoa(cell.Streams), "--duration", tp.duration.String(), "--json", path + ".tmp"}
	if tp.Reverse {
		args = append(args, "--reverse")
	}
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
		if err != nil {
			return nil, err
		}
		out, err := cmd.CombinedOutput()
		if err == nil {
			b, err := os.ReadFile(path + ".tmp")
			if err != nil {
				return nil, err
			}
			var res load.StreamResult
			if err := json.Unmarshal(b, &res); err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			return &res, os.Rename(path+".tmp", path)
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

// aggregateThroughput reads every finished throughput file.
func (r *runner) aggregateThroughput() ([]ThroughputResult, error) {
	tp := r.e.Throughput
	if tp == nil {
		return nil, nil
	}
	var out []ThroughputResult
	for _, sc := range r.e.scenarios {
		for _, t := range r.e.Tools {
			for _, streams := range tp.Streams {
				c := ThroughputResult{ThroughputCell: ThroughputCell{Scenario: sc.Name, Tool: t, Streams: streams}}
				for rep := 1; rep <= r.e.Repetitions; rep++ {
					b, err := os.ReadFile(throughputPath(r.dir, c.ThroughputCell, rep))
					if errors.Is(err, os.ErrNotExist) {
						continue
					}
					if err != nil {
						return nil, err
					}
					var res load.StreamResult
					if err := json.Unmarshal(b, &res); err != nil {
						return nil, fmt.Errorf("read %s: %w", throughputPath(r.dir, c.ThroughputCell, rep), err)
					}
					c.Gbps = append(c.Gbps, res.Gbps)
					c.Retransmits += res.Retransmits
					c.CC = res.CC
				}
				if len(c.Gbps) == 0 {
					continue
				}
				for _, g := range c.Gbps {
					c.MeanGbps += g / float64(len(c.Gbps))
				}
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// WriteThroughputTable prints mean throughput per cell and its ratio to
// direct in the same scenario with the same stream count.
func WriteThroughputTable(w io.Writer, cells []ThroughputResult) {
	if len(cells) == 0 {
		return
	}
	direct := map[ThroughputCell]float64{}
	for _, c := range cells {
		if c.Tool == "direct" {
			k := c.ThroughputCell
			k.Tool = ""
			direct[k] = c.MeanGbps
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttool\tstreams\treps\tmean Gbit/s\tmin\tmax\tretransmits\tsender cc\tvs direct\t")
	for _, c := range cells {
		k := c.ThroughputCell
		k.Tool = ""
		ratio := "-"
		if d, ok := direct[k]; ok && d > 0 && c.Tool != "direct" {
			ratio = fmt.Sprintf("%.3f×", c.MeanGbps/d)
		}
		lo, hi := c.Gbps[0], c.Gbps[0]
		for _, g := range c.Gbps {
			lo, hi = min(lo, g), max(hi, g)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%d\t%s\t%s\t\n", c.Scenario, c.Tool, c.Streams, len(c.Gbps), c.MeanGbps, lo, hi, c.Retransmits, c.CC, ratio)
	}
	tw.Flush()
}
