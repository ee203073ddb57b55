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
