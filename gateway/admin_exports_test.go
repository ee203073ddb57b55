package gateway

import (
	"strings"
	"testing"
)

func TestDecodeExportWatch(t *testing.T) {
	w, err := decodeExportWatch([]byte(`{"revision":7,"reset":true,"changed":[{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"ServiceExport",` +
		`"metadata":{"name":"echo","namespace":"ns","labels":{"a":"b"}},"spec":{"target":"10.0.0.1:80","ports":[{"name":"http","port":8080}]}}],` +
		`"deleted":[{"kind":"ServiceExport","namespace":"ns","name":"old"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	se := w.Changed[0]
	if w.Revision != 7 || !w.Reset || se.Metadata.Name != "echo" || se.Metadata.Namespace != "ns" || se.Metadata.Labels["a"] != "b" ||
		se.Spec.Ports[0].Port != 8080 || se.Spec.Target != "" || w.Deleted[0].Name != "old" {
		t.Fatalf("decoded %+v %+v", w, se)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"changed":[{"kind":"Peer","metadata":{"name":"x"}}]}`, "kind"},
		{`{"changed":[{"kind":"ServiceExport","metadata":{}}]}`, "metadata.name"},
		{`{"revision":"x"}`, "gateway watch"},
	} {
		if _, err := decodeExportWatch([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

// FuzzDecodeExportWatch: any answer decodes without panicking, and what
// decodes holds only named ServiceExports.
func FuzzDecodeExportWatch(f *testing.F) {
	f.Add([]byte(`{"revision":1,"changed":[{"kind":"ServiceExport","metadata":{"name":"a"},"spec":{"ports":[{"port":1}]}}],"deleted":[{"kind":"ServiceExport","name":"b"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		w, err := decodeExportWatch(body)
		if err != nil {
			return
		}
		for _, se := range w.Changed {
			if se == nil || se.Metadata.Name == "" {
				t.Fatalf("accepted %+v", se)
			}
		}
	})
}
