package catalog

import (
	"reflect"
	"strings"
	"testing"
)

// TestTargetFor: each port goes to its own target, else spec.target; a
// port the export does not list, and a port not said when the ports have
// different targets, are errors, never another port's target.
func TestTargetFor(t *testing.T) {
	export := func(target string, ports ...ServicePort) *ServiceExport {
		e := &ServiceExport{Metadata: ObjectMeta{Name: "svc", Namespace: "ns"}, Spec: ServiceExportSpec{Target: target, Ports: ports}}
		if err := e.Validate(); err != nil {
			t.Fatalf("export %+v: %v", e.Spec, err)
		}
		return e
	}
	for _, tt := range []struct {
		name    string
		e       *ServiceExport
		want    map[int32]string // port → target; "" means an error
		targets []string
	}{
		{"no ports: every port to spec.target", export("a:1"),
			map[int32]string{0: "a:1", 80: "a:1", 9090: "a:1"}, []string{"a:1"}},
		{"one port with a target of its own", export("a:1",
			ServicePort{Name: "http", Port: 80},
			ServicePort{Name: "metrics", Port: 9090, Target: "b:2"},
			ServicePort{Name: "dns", Port: 53, Protocol: UDP, Target: "c:3"}),
			map[int32]string{80: "a:1", 9090: "b:2", 53: "", 8080: "", 0: ""}, []string{"a:1", "b:2"}},
		{"every port its own, one address", export("",
			ServicePort{Name: "x", Port: 1, Target: "b:2"},
			ServicePort{Name: "y", Port: 2, Protocol: TCP, Target: "b:2"}),
			map[int32]string{0: "b:2", 1: "b:2", 2: "b:2", 3: ""}, []string{"b:2"}},
		{"spec.target unused", export("a:1", ServicePort{Port: 80, Target: "b:2"}),
			map[int32]string{0: "b:2", 80: "b:2", 81: ""}, []string{"b:2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for port, want := range tt.want {
				got, err := tt.e.TargetFor(port)
				switch {
				case want == "" && err == nil:
					t.Errorf("TargetFor(%d) = %q, want an error", port, got)
				case want == "" && !strings.Contains(err.Error(), "export ns/svc"):
					t.Errorf("TargetFor(%d): error %q does not name the export", port, err)
				case want != "" && (err != nil || got != want):
					t.Errorf("TargetFor(%d) = %q, %v; want %q", port, got, err, want)
				}
			}
			if got := tt.e.Targets(); !reflect.DeepEqual(got, tt.targets) {
				t.Errorf("Targets() = %q, want %q", got, tt.targets)
			}
		})
	}
}
