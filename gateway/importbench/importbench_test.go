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
// import echoes, and the figures are measurements.
func TestBenchSmall(t *testing.T) {
	modes := []string{gateway.InterceptListeners}
	if os.Geteuid() == 0 {
		modes = append(modes, gateway.InterceptSteer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := importbench.Run(ctx, importbench.Config{Binary: testenv.StraitBinary(t), Imports: 300, Chunk: 100, Sample: 10,
		Intercepts: modes, Dir: t.TempDir()})
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
	}
	if (&importbench.Config{Binary: "x", Intercepts: []string{"tproxy"}}).Validate() == nil {
		t.Error("intercept tproxy accepted")
	}
}
