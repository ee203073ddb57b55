package run

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strait-net/strait/lab/scenario"
)

// TestDropToolFiles: a unit whose emulator died drops the raw files of the
// tool it was measuring, in that unit only, and not those of a tool whose
// name extends it or of a scenario whose name does.
func TestDropToolFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raw"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{ // name: dropped
		"cloud5-strait-echo-60B-r1.csv":                true,
		"cloud5-strait-rate-echo-1KB-10000rps-r1.json": true,
		"cloud5-strait-stream-x1-r1.json":              true,
		"cloud5-strait-echo-60B-r2.csv":                false, // another repetition
		"cloud5-strait-echo-60B-r11.csv":               false,
		"cloud5-strait-packet-echo-60B-r1.csv":         false, // another tool
		"cloud5-direct-echo-60B-r1.csv":                false,
		"cloud50-strait-echo-60B-r1.csv":               false, // another scenario
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, "raw", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &runner{dir: dir, e: &Experiment{Tools: []string{"direct", "strait", "strait-packet"}}}
	if err := r.dropToolFiles(unit{scenario: scenario.Scenario{Name: "cloud5"}, rep: 1}, "strait"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	for name, dropped := range files {
		if slices.Contains(left, name) == dropped {
			t.Errorf("%s: dropped %v, want %v", name, !dropped, dropped)
		}
	}
}
