package run

import (
	"io"
	"strconv"

	"github.com/strait-net/strait/report"
)

// WriteTable prints one row per cell: the seed 001 statistics of total
// response time, each tool's IQR mean relative to direct in the same
// scenario, workload and payload with its 95 % bootstrap interval, and a
// flag where the median misses the
// workload's KPI (kpis, in ms; seed 000's criterion).
func WriteTable(w io.Writer, cells []CellResult, kpis map[string]float64) error {
	t := report.Table{Header: append(append([]string{"scenario", "workload", "payload", "tool"}, report.SummaryHeader()...), "vs direct", "95% CI", "KPI")}
	for _, c := range cells {
		flag := ""
		if kpi, ok := kpis[c.Workload]; ok {
			flag = "ok"
			if c.OK == 0 || c.MedianMS > kpi {
				flag = "MISSED " + strconv.FormatFloat(kpi, 'f', -1, 64) + " ms"
			}
		}
		row := append([]string{c.Scenario, c.Workload, report.FormatSize(c.Payload), c.Tool}, c.Summary.Cells()...)
		ratio, ci := "-", "-"
		if c.RatioIQRMean != nil {
			ratio = report.FormatRatio(*c.RatioIQRMean, true)
			if iv := c.RatioIQRMeanCI; iv != nil && iv.Valid() {
				ci = "[" + strconv.FormatFloat(iv.Lo, 'f', 3, 64) + ", " + strconv.FormatFloat(iv.Hi, 'f', 3, 64) + "]"
			}
		}
		t.Add(append(row, ratio, ci, flag)...)
	}
	_, err := t.WriteTo(w)
	return err
}
