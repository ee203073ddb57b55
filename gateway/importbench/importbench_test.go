package importbench_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/importbench"
	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestBenchSmall runs the bench at a small scale on real gateway processes:
// in every mode the gateway reports the mode asked for, every sampled
// import echoes, the figures are measurements, the keep-alive client
// through the import that stays is answered in every phase without an
// error, and after the delete the gateway holds no more descriptors and
// goroutines than before the imports.
func TestBenchSmall(t *testing.T) {
	modes := []string{gateway.InterceptListeners}
	if os.Geteuid() == 0 {
		modes = append(modes, gateway.InterceptSteer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := importbench.Run(ctx, importbench.Config{Binary: testenv.StraitBinary(t), Imports: 1200, Chunk: 400, Sample: 10,
		Intercepts: modes, Pace: time.Millisecond, Baseline: 200 * time.Millisecond, Dir: t.TempDir()})
	var b strings.Builder
	importbench.WriteTable(&b, rs)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		switch {
		case r.Intercept != modes[i]:
			t.Errorf("ran %s, gateway reported %s", modes[i], r.Intercept)
		case r.Sampled != 10 || r.Echoed != r.Sampled:
			t.Errorf("%s: %d of %d sampled imports echoed, want all of 10", r.Intercept, r.Echoed, r.Sampled)
		case r.Calls != 3 || r.Apply <= 0 || r.Delete <= 0 || r.RSSAfter == 0 || r.Warning != "":
			t.Errorf("%s: %+v: not a measurement of 3 clean applies", r.Intercept, r)
		}
		// The apply and the delete of 1200 imports take several of the
		// keep-alive's 1 ms gaps even on a quiet host.
		for p, l := range r.KeepAlive {
			if l.N == 0 || l.Errors != 0 || l.P50 <= 0 || l.P99 < l.P50 {
				t.Errorf("%s: keep-alive phase %d: %+v, want requests answered and no errors", r.Intercept, p, l)
			}
		}
		// Slack: the metrics scrape's own connection.
		if b, a := r.Before, r.Released; b.FDs == 0 || b.Goroutines == 0 || b.RSS == 0 || a.FDs > b.FDs+2 || a.Goroutines > b.Goroutines+4 {
			t.Errorf("%s: gateway before the imports %+v, after the delete %+v: not released", r.Intercept, b, a)
		}
	}
	if (&importbench.Config{Binary: "x", Intercepts: []string{"tproxy"}}).Validate() == nil {
		t.Error("intercept tproxy accepted")
	}
}
