package gateway

import (
	"bytes"
	"testing"
)

// FuzzDecodeResources: the admin API's JSON apply body never panics, and
// what it accepts is valid.
func FuzzDecodeResources(f *testing.F) {
	f.Add([]byte(`[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport","metadata":{"name":"a","namespace":"n"},"spec":{"target":"127.0.0.1:9"}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"kind":"Peer"}]`))
	// Edges: nothing, cut short, ports past int32 and negative, invalid
	// UTF-8.
	f.Add([]byte{})
	f.Add([]byte(`[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport","metadata":{"name":"a","namesp`))
	f.Add([]byte(`[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport","metadata":{"name":"a","namespace":"n"},"spec":{"target":"127.0.0.1:99999999999999999999","ports":[{"port":4294967297}]}}]`))
	f.Add([]byte(`[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport","metadata":{"name":"a","namespace":"n"},"spec":{"target":"127.0.0.1:-1","ports":[{"port":-1}]}}]`))
	f.Add([]byte(`[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport","metadata":{"name":"` + "\xff\xfe" + `","namespace":"n"},"spec":{"target":"127.0.0.1:9"}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := decodeResources(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range rs {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted an invalid resource: %v", err)
			}
		}
	})
}
