package run

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints one row per cell: the seed 001 statistics of total
// response time, and each tool's IQR mean relative to direct in the same
// scenario, workload and payload.
func WriteTable(w io.Writer, cells []CellResult) {
	direct := map[Cell]float64{}
	for _, c := range cells {
		if c.Tool == "direct" {
			k := c.Cell
			k.Tool = ""
			direct[k] = c.IQRMeanMS
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tworkload\tpayload\ttool\tn\terrors\tmin ms\tIQR mean ms\tmedian ms\tp90 ms\tp99 ms\tmax ms\tvs direct\t")
	for _, c := range cells {
		k := c.Cell
		k.Tool = ""
		ratio := "-"
		if d, ok := direct[k]; ok && d > 0 && c.Tool != "direct" {
			ratio = fmt.Sprintf("%.3f×", c.IQRMeanMS/d)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t\n",
			c.Scenario, c.Workload, FormatSize(c.Payload), c.Tool, c.Count, c.Errors,
			c.MinMS, c.IQRMeanMS, c.MedianMS, c.P90MS, c.P99MS, c.MaxMS, ratio)
	}
	tw.Flush()
}
