package multigw

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunDirAbsolute: `strait lab run failover` from a checkout writes
// under the relative results/, and the gateways it starts resolve their
// configurations' relative paths against the configurations' own
// directory, so the run directory must be absolute.
func TestRunDirAbsolute(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 3, 18, 4, 0, time.UTC)
	for _, out := range []string{"results", "", "/var/tmp/runs"} {
		dir, err := runDir(out, "builtin/failover.yaml", at)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(out, "failover-20261129-031804")
		if !filepath.IsAbs(out) {
			want = filepath.Join(wd, want)
		}
		if dir != want {
			t.Errorf("runDir(%q) = %q, want %q", out, dir, want)
		}
	}
}
