package gateway

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
)

// wireSamples are resources of every shape the binary body carries: imports
// with and without optional fields, and other kinds (as JSON records).
func wireSamples() []catalog.Resource {
	return []catalog.Resource{
		&catalog.ServiceImport{
			Metadata: catalog.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"b": "2", "a": "1"}, Annotations: map[string]string{"note": "x"}},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{"10.1.0.1", "fd00::1"},
				Ports:    []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, AppProtocol: "h2", Port: 80}, {Name: "dns", Protocol: catalog.UDP, Port: 53}},
				Clusters: []catalog.ClusterStatus{{Cluster: "c1"}, {Cluster: "c2"}}},
		},
		// Defaults left out (namespace, type, protocol), status instead of
		// spec.clusters.
		&catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: "db"}, Spec: catalog.ServiceImportSpec{IPs: []string{"10.1.0.2"}, Ports: []catalog.ServicePort{{Port: 5432}}},
			Status: &catalog.ServiceImportStatus{Clusters: []catalog.ClusterStatus{{Cluster: "c3"}}}},
		&catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: "hl", Namespace: "n"}, Spec: catalog.ServiceImportSpec{Type: catalog.Headless}, Status: &catalog.ServiceImportStatus{}},
		&catalog.Peer{Metadata: catalog.ObjectMeta{Name: "c1"}, Spec: catalog.PeerSpec{Gateways: []string{"10.0.0.1:4443"}}},
		&catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "a", Namespace: "n"}, Spec: catalog.ServiceExportSpec{Target: "127.0.0.1:9"}},
		&catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "b", Labels: map[string]string{"tier": "db"}},
			Spec: catalog.ServiceExportSpec{Ports: []catalog.ServicePort{{Name: "pg", Port: 5432, Target: "127.0.0.1:5432"}, {Name: "m", Protocol: catalog.UDP, Port: 9, Target: "127.0.0.1:9"}}}},
	}
}

// TestAdminWireRoundTrip: what the binary body delivers is exactly what
// the JSON body delivers for the same resources (decoded, defaulted,
// validated), so the store cannot tell which one an agent used.
func TestAdminWireRoundTrip(t *testing.T) {
	rs := wireSamples()
	b, err := appendResources(nil, rs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeResourcesBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rs) {
		t.Fatalf("decoded %d resources, want %d", len(got), len(rs))
	}
	for i, r := range rs {
		j, err := catalog.EncodeJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := catalog.DecodeJSON(j)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("resource %d:\n got  %#v\n want %#v", i, got[i], want)
		}
	}
}

// TestAdminWireRejects: bad bodies are refused with the problem named,
// never a panic or a huge allocation.
func TestAdminWireRejects(t *testing.T) {
	good, err := appendResources(nil, wireSamples()[:1])
	if err != nil {
		t.Fatal(err)
	}
	invalid, err := appendResources(nil, []catalog.Resource{&catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: "Bad_Name", Namespace: "n"},
		Spec: catalog.ServiceImportSpec{IPs: []string{"10.0.0.1"}, Ports: []catalog.ServicePort{{Port: 80}}}}})
	if err != nil {
		t.Fatal(err)
	}
	forged := binary.AppendUvarint([]byte{'S', 'R', 1}, 1<<40) // a count no body holds
	// One import whose only port number is past int32.
	badPort := []byte{'S', 'R', 1, 1, recImport, 0, 1, 'x', 0, 0, 0, 0, 1, 0, 0, 0}
	badPort = binary.AppendVarint(badPort, 1<<40)
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, `want magic "SR"`},
		{"json", []byte(`[]`), `want magic "SR"`},
		{"version", []byte{'S', 'R', 9, 0}, "version 9"},
		{"forged count", forged, "exceeds"},
		{"truncated", good[:len(good)-3], "resource 0"},
		{"trailing", append(append([]byte{}, good...), 0), "1 bytes after"},
		{"tag", []byte{'S', 'R', 1, 1, 7, 0}, "record tag 7"},
		{"invalid export", func() []byte {
			b, _ := appendResources(nil, []catalog.Resource{&catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "e", Namespace: "n"}, Spec: catalog.ServiceExportSpec{Target: "nohostport"}}})
			return b
		}(), "spec.target"},
		{"invalid import", invalid, "metadata.name"},
		{"bad json record", append([]byte{'S', 'R', 1, 1, recJSON, 2}, "{}"...), "resource 0"},
		{"unordered labels", func() []byte {
			b := append([]byte{'S', 'R', 1, 1, recImport}, 1, 'n', 1, 'x', 2)
			return append(b, 1, 'b', 0, 1, 'a', 0)
		}(), "metadata.labels"},
		{"port range", badPort, "32-bit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := decodeResourcesBinary(tt.body)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decode = %d resources, %v; want an error containing %q", len(rs), err, tt.want)
			}
		})
	}
}

// FuzzDecodeResourcesBinary: the binary apply body never panics, what it
// accepts is valid, and encoding it again gives the same resources.
func FuzzDecodeResourcesBinary(f *testing.F) {
	for i := range wireSamples() {
		b, err := appendResources(nil, wireSamples()[i:i+1])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	all, _ := appendResources(nil, wireSamples())
	f.Add(all)
	f.Add([]byte{'S', 'R', 1, 0})
	f.Add([]byte{'S', 'R', 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := decodeResourcesBinary(data)
		if err != nil {
			return
		}
		for _, r := range rs {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted an invalid resource: %v", err)
			}
		}
		b, err := appendResources(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeResourcesBinary(b)
		if err != nil {
			t.Fatalf("re-encoded body refused: %v", err)
		}
		if !reflect.DeepEqual(rs, again) {
			t.Fatalf("round trip changed the resources:\n%#v\n%#v", rs, again)
		}
	})
}
