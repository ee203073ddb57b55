// Package html writes a lab run as one self-contained HTML page: the run's
// metadata, box plots of response time per scenario and tool like seed
// 000's Figs 3–9, response time against payload size, seed 001's Table 3,
// and every cell's statistics with bootstrap confidence intervals. The page
// fetches nothing: styles are inline and plots are inline SVG drawn with
// gonum.org/v1/plot, so it opens offline and can be mailed or archived.
package html

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// Run is what a report shows: the measured cells and how they were
// measured.
type Run struct {
	// Dir is where the run was loaded from; shown, not read.
	Dir      string
	Metadata Metadata
	// Cells in any order; a cell appearing twice is merged.
	Cells []Cell
	// Scenarios orders the x axis of the box plots and the tables' rows.
	// Scenarios not listed follow in order of first appearance in Cells.
	// LoadRun fills it from the metadata (the experiment's order, which is
	// the catalog's for seed experiments).
	Scenarios []string
	// KPIs maps a workload to its response-time limit in milliseconds, drawn
	// as a line and flagged in the tables; nil means DefaultKPIs.
	KPIs map[string]float64
	// Bootstrap configures the confidence intervals; the zero value is
	// 2000 resamples at 95 %.
	Bootstrap report.Bootstrap
	// Rate holds the open-loop (`rate:`) cells, Throughput the stream
	// (`throughput:`) cells, as the runner's rate.json and throughput.json
	// hold them; either may be empty.
	Rate       []report.RateSummary
	Throughput []report.ThroughputSummary
	// Iperf holds iperf3 and ping cells (iperf3.json); CellUsage the
	// closed-loop cells' usage (summary.json's usage fields).
	Iperf     []report.IperfSummary
	CellUsage []CellUsage
	// Soak holds the soak experiments' series and verdicts (soak.json).
	Soak []SoakResult
}

// CellUsage is a closed-loop cell's CPU and memory, as summary.json has it.
type CellUsage struct {
	Scenario string               `json:"scenario"`
	Tool     string               `json:"tool"`
	Workload string               `json:"workload"`
	Payload  int                  `json:"payload"`
	Usage    *report.UsageSummary `json:"usage"`
}

// Cell is one measured combination and its requests.
type Cell struct {
	Scenario string
	Tool     string
	Workload string
	Payload  int // request payload in bytes
	Samples  []load.Sample
}

// Metadata is the part of a run's metadata.json the report shows. Its JSON
// names are those the lab runner writes.
type Metadata struct {
	Experiment string            `json:"experiment"`
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Host       map[string]string `json:"host"` // kernel, cpu, cpus, go
	Strait     string            `json:"straitVersion"`
	Emulation  string            `json:"emulationBackend"`
	// TCPCC maps a node to its TCP congestion control algorithm.
	TCPCC     map[string]string `json:"tcpCongestionControl"`
	Tools     map[string]string `json:"tools"` // tool → version
	Scenarios []ScenarioInfo    `json:"scenarios"`
	// Load holds the load generator's parameters as written; Rate and
	// Throughput those of the open-loop and stream measurements.
	Load           map[string]any `json:"load"`
	Rate           map[string]any `json:"rate,omitempty"`
	Throughput     map[string]any `json:"throughput,omitempty"`
	Repetitions    int            `json:"repetitions,omitempty"`
	ExperimentFile string         `json:"experimentFile"`
	// KPIs are the experiment's response-time limits per workload, in ms;
	// LoadRun makes them the report's (runs written before the runner
	// recorded them fall back to DefaultKPIs).
	KPIs map[string]float64 `json:"kpis,omitempty"`
	// EmulatorSeeds are the userspace emulator's random seeds per unit;
	// Build is Go's record of how strait was built (commit, modified).
	EmulatorSeeds map[string]uint64 `json:"emulatorSeeds,omitempty"`
	Build         map[string]string `json:"build,omitempty"`
	// Iperf3 are the iperf3 and ping settings; Reference a seed's
	// published figures; ToolUsage each tool's CPU and memory over the run.
	Iperf3    map[string]any                  `json:"iperf3,omitempty"`
	Reference *Reference                      `json:"reference,omitempty"`
	ToolUsage map[string]*report.UsageSummary `json:"toolUsage,omitempty"`
	// Clusters describes the clusters of a run on Kubernetes clusters
	// (`strait lab run --clusters`); nil for the namespace lab.
	Clusters *report.ClusterRun `json:"clusters,omitempty"`
}

// ScenarioInfo describes a scenario's link emulation.
type ScenarioInfo struct {
	Name string `json:"name"`
	LAN  string `json:"lan"`
	WAN  string `json:"wan"`
	MTU  string `json:"mtu,omitempty"`
}

// DefaultKPIs are seed 000's response-time limits: 1000 ms for remote
// maintenance inference (echo) and training (recv), 100 ms for vehicle
// decision assist (static).
var DefaultKPIs = map[string]float64{"echo": 1000, "recv": 1000, "static": 100}

// The columns requests.csv puts before load's own.
var cellColumns = []string{"scenario", "tool", "workload", "payload_bytes"}

// LoadRun reads a run directory as `strait lab run` writes it:
// requests.csv (one row per request) and metadata.json.
func LoadRun(dir string) (Run, error) {
	r := Run{Dir: dir}
	mdPath := filepath.Join(dir, "metadata.json")
	b, err := os.ReadFile(mdPath)
	if err != nil {
		return Run{}, fmt.Errorf("load run %s: %w (a run directory holds requests.csv and metadata.json)", dir, err)
	}
	if err := json.Unmarshal(b, &r.Metadata); err != nil {
		return Run{}, fmt.Errorf("load run: %s: %w", mdPath, err)
	}
	var has struct {
		KPIs *map[string]float64 `json:"kpis"`
	}
	if json.Unmarshal(b, &has) == nil && has.KPIs != nil {
		r.KPIs = map[string]float64{} // recorded, even if empty: no defaults
		maps.Copy(r.KPIs, *has.KPIs)
	}
	for _, s := range r.Metadata.Scenarios {
		r.Scenarios = append(r.Scenarios, s.Name)
	}
	if err := readJSON(filepath.Join(dir, RateFile), &r.Rate); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	if err := readJSON(filepath.Join(dir, ThroughputFile), &r.Throughput); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	if err := readJSON(filepath.Join(dir, IperfFile), &r.Iperf); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	if err := readJSON(filepath.Join(dir, SoakFile), &r.Soak); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	var summary []CellUsage
	if err := readJSON(filepath.Join(dir, "summary.json"), &summary); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	for _, c := range summary {
		if c.Usage != nil {
			r.CellUsage = append(r.CellUsage, c)
		}
	}
	csvPath := filepath.Join(dir, "requests.csv")
	// A run of only rate or throughput measurements has no requests; the
	// runner leaves requests.csv empty then.
	if fi, err := os.Stat(csvPath); (len(r.Rate) > 0 || len(r.Throughput) > 0 || len(r.Iperf) > 0 || len(r.Soak) > 0) && (errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0) {
		return r, nil
	}
	if r.Cells, err = readRequests(csvPath); err != nil {
		return Run{}, fmt.Errorf("load run %s: %w", dir, err)
	}
	return r, nil
}

// The files the lab runner writes beside requests.csv.
const (
	RateFile       = "rate.json"
	ThroughputFile = "throughput.json"
	IperfFile      = "iperf3.json"
)

// readJSON decodes path into v; a missing file leaves v as it is.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readRequests reads requests.csv twice: once with load.ReadCSV, which
// checks and decodes the request columns (ignoring the cell columns it does
// not know), and once for the cell columns, row by row alongside.
func readRequests(path string) ([]Cell, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := load.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	cr := csv.NewReader(f)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	idx := make([]int, len(cellColumns))
	for i, name := range cellColumns {
		idx[i] = -1
		for j, h := range header {
			if h == name {
				idx[i] = j
			}
		}
		if idx[i] < 0 {
			return nil, fmt.Errorf("%s: header: missing column %q (want %v before the request columns)", path, name, cellColumns)
		}
	}
	type key struct {
		scenario, tool, workload string
		payload                  int
	}
	at := map[key]int{}
	var cells []Cell
	for i := range samples {
		rec, err := cr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%s: line %d: %w", path, i+2, err)
		}
		p, err := strconv.Atoi(rec[idx[3]])
		if err != nil || p < 0 {
			return nil, fmt.Errorf("%s: line %d: payload_bytes %q: want a whole number of bytes", path, i+2, rec[idx[3]])
		}
		k := key{rec[idx[0]], rec[idx[1]], rec[idx[2]], p}
		for c, v := range []string{k.scenario, k.tool, k.workload} {
			if v == "" {
				return nil, fmt.Errorf("%s: line %d: %s is empty", path, i+2, cellColumns[c])
			}
		}
		n, ok := at[k]
		if !ok {
			n = len(cells)
			at[k] = n
			cells = append(cells, Cell{Scenario: k.scenario, Tool: k.tool, Workload: k.workload, Payload: k.payload})
		}
		cells[n].Samples = append(cells[n].Samples, samples[i])
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("%s: no requests", path)
	}
	return cells, nil
}
