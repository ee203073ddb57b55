package placement

import (
	"os"
	"strings"
	"testing"
)

// TestCompare runs the small sizes always; STRAIT_PLACEMENT_COMPARE=1 adds
// the large ones (up to 100 brokers × 1000 clusters × 10 000 VPCs).
func TestCompare(t *testing.T) {
	big := os.Getenv("STRAIT_PLACEMENT_COMPARE") != ""
	var rows []Row
	for _, g := range StandardSizes(1) {
		if !big && g.Brokers*g.Clusters > 10*100 {
			continue
		}
		r, err := Compare(g, Config{Seed: 1})
		if err != nil {
			t.Fatalf("%+v: %v", g, err)
		}
		if r.Bound < r.Relax*(1-1e-9) {
			t.Errorf("%+v: bound %v < relaxation %v", g, r.Bound, r.Relax)
		}
		if r.RBCM < r.Bound*(1-1e-6) || r.Greedy < r.Bound*(1-1e-6) {
			t.Errorf("%+v: an integral solution beats the LP bound: rbcm %v greedy %v bound %v", g, r.RBCM, r.Greedy, r.Bound)
		}
		rows = append(rows, r)
	}
	var sb strings.Builder
	if err := WriteTable(&sb, rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", sb.String())
}
