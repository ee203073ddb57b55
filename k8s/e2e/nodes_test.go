package e2e

import (
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv/k8snodes"
)

// nodePatience bounds each wait on real nodes: pods start in seconds on an
// idle host but the suite shares 2 cores with everything else. A hang
// detector, not a performance bound.
const nodePatience = 5 * time.Minute

// waitNodes is eventually with room for pods to start on a loaded host.
func waitNodes(t *testing.T, what string, f func() error) {
	t.Helper()
	d := k8snodes.Eventually(t, what, nodePatience, time.Second, f)
	t.Logf("%s: after %v", what, d.Round(time.Millisecond))
}
