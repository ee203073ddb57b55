package fabric

import (
	"os/exec"
	"strings"
	"testing"
)

// Identities come before everything that uses them: the catalog, the
// gateways and the brokers all import fabric, so fabric may import only the
// module's internal packages (README, "Layout").
func TestFabricImportsOnlyInternalPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/strait-net/strait/"
	for _, p := range strings.Fields(string(out)) {
		rest, ours := strings.CutPrefix(p, module)
		if ours && rest != "fabric" && !strings.HasPrefix(rest, "internal/") {
			t.Errorf("fabric depends on %s", p)
		}
	}
}
