package run

import (
	"io"
	"strconv"

	"github.com/strait-net/strait/report"
)

// WriteTable prints one row per cell: the seed 001 statistics of total
// response time, each tool's IQR mean relative to direct in the same
// scenario, workload and payload, and a flag where the median misses the
// workload's KPI (kpis, in ms; seed 000's criterion).
func WriteTable(w io.Writer, cells []CellResult, kpis map[string]float64) {
	ratio := report.RatioToDirect(cells,
		func(c CellResult) Cell { k := c.Cell; k.Tool = ""; return k },
		func(c CellResult) string { return c.Tool },
		func(c CellResult) float64 { return c.IQRMeanMS })
	t := report.Table{Header: append(append([]string{"scenario", "workload", "payload", "tool"}, report.SummaryHeader()...), "vs direct", "KPI")}
	for _, c := range cells {
		flag := ""
		if kpi, ok := kpis[c.Workload]; ok {
			flag = "ok"
			if c.OK == 0 || c.MedianMS > kpi {
				flag = "MISSED " + strconv.FormatFloat(kpi, 'f', -1, 64) + " ms"
			}
		}
		row := append([]string{c.Scenario, c.Workload, FormatSize(c.Payload), c.Tool}, c.Summary.Cells()...)
		t.Add(append(row, report.FormatRatio(ratio(c)), flag)...)
	}
	_, _ = t.WriteTo(w)
}
