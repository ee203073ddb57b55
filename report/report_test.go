package report

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/load"
)

// Expected values are computed by hand with type 7: h = (n-1)p,
// q = x[⌊h⌋] + (h-⌊h⌋)(x[⌊h⌋+1]-x[⌊h⌋]); they match R's quantile() and
// numpy.percentile's defaults.
func TestQuantile(t *testing.T) {
	tests := []struct {
		x    []float64
		p    float64
		want float64
	}{
		{[]float64{7}, 0, 7},
		{[]float64{7}, 0.5, 7},
		{[]float64{7}, 1, 7},
		{[]float64{1, 3}, 0.25, 1.5},
		{[]float64{1, 3}, 0.5, 2},
		{[]float64{1, 3}, 0.75, 2.5},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 0.25, 1.75}, // h = 0.75
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},   // h = 1.5
		{[]float64{1, 2, 3, 4}, 0.75, 3.25}, // h = 2.25
		{[]float64{1, 2, 3, 4}, 0.9, 3.7},   // h = 2.7
		{[]float64{1, 2, 3, 4}, 0.99, 3.97}, // h = 2.97
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{1, 2, 3, 4, 100}, 0.9, 61.6},                // h = 3.6: 4 + 0.6·96
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 9.91}, // h = 8.91
		{[]float64{5, 5, 5, 5}, 0.3, 5},
		{[]float64{1, 2}, -1, 1}, // clamped
		{[]float64{1, 2}, 2, 2},
	}
	for _, tt := range tests {
		if got := Quantile(tt.x, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tt.x, tt.p, got, tt.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of nothing is not NaN")
	}
}

func TestIQRMean(t *testing.T) {
	tests := []struct {
		x    []float64
		want float64
		why  string
	}{
		{[]float64{7}, 7, "one value"},
		{[]float64{1, 3}, 2, "two values: none within [1.5, 2.5], so the median"},
		{[]float64{4, 4}, 4, "two equal values"},
		{[]float64{1, 2, 3}, 2, "[1.5, 2.5] holds 2"},
		{[]float64{1, 2, 3, 4}, 2.5, "[1.75, 3.25] holds 2, 3"},
		{[]float64{1, 2, 3, 4, 100}, 3, "[2, 4] holds 2, 3, 4: the outlier is out"},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5.5, "[3.25, 7.75] holds 4..7"},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 4.4, "[4, 5.5] holds 4, 4, 4, 5, 5: ties at Q1 count"},
	}
	for _, tt := range tests {
		if got := IQRMean(tt.x); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("IQRMean(%v) = %v, want %v (%s)", tt.x, got, tt.want, tt.why)
		}
	}
	if !math.IsNaN(IQRMean(nil)) {
		t.Error("IQRMean of nothing is not NaN")
	}
}

func samples(totalsUS ...int) []load.Sample {
	var s []load.Sample
	for i, us := range totalsUS {
		x := load.Sample{Thread: 1, Seq: i + 1, Total: time.Duration(us) * time.Microsecond, Status: 200}
		if us < 0 {
			x.Total, x.Status, x.Err = time.Second, 0, "read response: response timeout after 1s"
		}
		s = append(s, x)
	}
	return s
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []load.Sample
		want Summary
	}{
		{"none", nil, Summary{}},
		{"all errors", samples(-1, -1), Summary{Count: 2, Errors: 2}},
		{"one", samples(1500), Summary{Count: 1, OK: 1, MinMS: 1.5, Q1MS: 1.5, MedianMS: 1.5, Q3MS: 1.5,
			IQRMeanMS: 1.5, MeanMS: 1.5, P90MS: 1.5, P99MS: 1.5, MaxMS: 1.5}},
		{"two, halfway rounds up to the µs", samples(1001, 1002), Summary{Count: 2, OK: 2, MinMS: 1.001,
			Q1MS: 1.001, MedianMS: 1.002, Q3MS: 1.002, IQRMeanMS: 1.002, MeanMS: 1.002, P90MS: 1.002, P99MS: 1.002, MaxMS: 1.002}},
		// Errors excluded from the times (their 1 s total would dominate).
		{"errors excluded", samples(4000, -1, 1000, 3000, 2000), Summary{Count: 5, Errors: 1, OK: 4, MinMS: 1,
			Q1MS: 1.75, MedianMS: 2.5, Q3MS: 3.25, IQRMeanMS: 2.5, MeanMS: 2.5, P90MS: 3.7, P99MS: 3.97, MaxMS: 4}},
		{"outlier", samples(1000, 2000, 3000, 4000, 100000), Summary{Count: 5, OK: 5, MinMS: 1, Q1MS: 2,
			MedianMS: 3, Q3MS: 4, IQRMeanMS: 3, MeanMS: 22, P90MS: 61.6, P99MS: 96.16, MaxMS: 100}},
	}
	for _, tt := range tests {
		if got := Summarize(tt.in); got != tt.want {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestSummaryJSON(t *testing.T) {
	b, err := json.Marshal(Summarize(samples(1000, 3000, -1)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"count":3,"errors":1,"ok":2,"min_ms":1,"q1_ms":1.5,"median_ms":2,"q3_ms":2.5,"iqr_mean_ms":2,"mean_ms":2,"p90_ms":2.8,"p99_ms":2.98,"max_ms":3}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestTable(t *testing.T) {
	tests := []struct {
		name string
		t    Table
		want string
	}{
		{"empty", Table{}, ""},
		{"numbers right, text left", Table{
			Header: []string{"scenario", "count", "median_ms", "note"},
			Rows: [][]string{
				{"local", "20", "0.065", "ok"},
				{"edge10", "200", "12.5", "-"},
				{"cloud30", "5", "-", "all errors"},
			},
		}, "" +
			"scenario  count  median_ms  note\n" +
			"local        20      0.065  ok\n" +
			"edge10      200       12.5  -\n" +
			"cloud30       5          -  all errors\n"},
		{"ragged rows, unicode", Table{
			Header: []string{"µs", "x"},
			Rows:   [][]string{{"1"}, {"22", "y", "1.5%"}},
		}, "" +
			"µs  x\n" +
			" 1\n" +
			"22  y  1.5%\n"},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

func TestSummaryCells(t *testing.T) {
	tab := Table{Header: SummaryHeader()}
	tab.Add(Summarize(samples(1000, 2000, 3000)).Cells()...)
	tab.Add(Summarize(samples(-1)).Cells()...)
	want := "" +
		"count  errors  min_ms  iqr_mean_ms  median_ms  p90_ms  p99_ms  max_ms\n" +
		"    3       0   1.000        2.000      2.000   2.800   2.980   3.000\n" +
		"    1       1       -            -          -       -       -       -\n"
	if got := tab.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !strings.HasPrefix(want, strings.Join(SummaryHeader()[:2], "  ")) {
		t.Error("header order")
	}
}
