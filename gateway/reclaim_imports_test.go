package gateway_test

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/strait-net/strait/catalog"
)

// TestReclaimAfterImportsDeleted applies 300 imports to a gateway and
// deletes them: once the imports it serves have stayed below half their
// peak for the quiet time, it returns memory to the system and counts it
// (reclaim.go), as it does after a burst of connections.
func TestReclaimAfterImportsDeleted(t *testing.T) {
	p := startPair(t)
	before := value(scrape(t, p.metrics["b"]), "strait_memory_reclaims_total")
	var imps []catalog.Resource
	for i := range 300 {
		addr := netip.AddrFrom4([4]byte{127, 61, byte(i / 250), byte(i%250 + 1)})
		imps = append(imps, &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: "r" + strconv.Itoa(i), Namespace: "bench"},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{addr.String()},
				Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, Port: 8080}}, Clusters: []catalog.ClusterStatus{{Cluster: "a"}}}})
	}
	if res, err := p.b.ApplyResources(imps); err != nil || res.Warning != "" {
		t.Fatalf("apply 300 imports: %+v, %v", res, err)
	}
	// The trigger samples once a second: let it see the peak.
	time.Sleep(2 * time.Second)
	if _, err := p.b.DeleteResources(imps); err != nil {
		t.Fatalf("delete the imports: %v", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		now := value(scrape(t, p.metrics["b"]), "strait_memory_reclaims_total")
		if now > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reclaim counted a minute after 300 imports were deleted (%v before, %v now)", before, now)
		}
	}
}
