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

// TestTargetForProtocol: a port number served over TCP and UDP at
// different addresses sends each protocol to its own, and a protocol the
// export does not list on that number is an error naming it.
func TestTargetForProtocol(t *testing.T) {
	e := &ServiceExport{Metadata: ObjectMeta{Name: "dns", Namespace: "ns"}, Spec: ServiceExportSpec{Target: "a:53", Ports: []ServicePort{
		{Name: "dns-tcp", Port: 53},
		{Name: "dns", Port: 53, Protocol: UDP, Target: "b:53"},
		{Name: "syslog", Port: 514, Protocol: UDP},
	}}}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		proto Protocol
		port  int32
		want  string // "" means an error
	}{
		{TCP, 53, "a:53"}, {"", 53, "a:53"}, {UDP, 53, "b:53"},
		{UDP, 514, "a:53"}, {TCP, 514, ""}, {UDP, 80, ""},
	} {
		got, err := e.TargetForProtocol(tt.proto, tt.port)
		switch {
		case tt.want == "" && (err == nil || !strings.Contains(err.Error(), "no "+string(tt.proto)+" port")):
			t.Errorf("TargetForProtocol(%s, %d) = %q, %v; want an error naming the protocol", tt.proto, tt.port, got, err)
		case tt.want != "" && (err != nil || got != tt.want):
			t.Errorf("TargetForProtocol(%s, %d) = %q, %v; want %q", tt.proto, tt.port, got, err, tt.want)
		}
	}
	noPorts := &ServiceExport{Metadata: ObjectMeta{Name: "x", Namespace: "ns"}, Spec: ServiceExportSpec{Target: "c:1"}}
	if got, err := noPorts.TargetForProtocol(UDP, 9); got != "c:1" || err != nil {
		t.Errorf("export without ports, UDP: %q, %v; want spec.target", got, err)
	}
}
