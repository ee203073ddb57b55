package broker

import (
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
)

// TestExportTargetsPrivate: what the broker publishes of an export has
// neither spec.target nor the ports' own targets (addresses inside the
// exporting cluster), the resource is left as it was, and an export that
// carries a port target anyway is refused.
func TestExportTargetsPrivate(t *testing.T) {
	se := &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "shop", Namespace: "default"},
		Spec: catalog.ServiceExportSpec{Target: "10.0.0.6:8080", Ports: []catalog.ServicePort{
			{Name: "http", Port: 80},
			{Name: "metrics", Port: 9090, Target: "10.0.0.7:9090"},
		}}}
	e := ExportOf(se)
	if len(e.Ports) != 2 || e.Ports[0].Port != 80 || e.Ports[1].Port != 9090 || e.Ports[1].Target != "" {
		t.Errorf("ExportOf: ports %+v, want 80 and 9090 without targets", e.Ports)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if se.Spec.Ports[1].Target != "10.0.0.7:9090" {
		t.Error("ExportOf changed the resource's port target")
	}
	e.Ports[1].Target = "10.0.0.7:9090"
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "ports[1].target: must be empty") {
		t.Errorf("Validate of an export with a port target: %v, want a refusal naming ports[1].target", err)
	}
}
