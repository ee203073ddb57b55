package catalog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// example holds one valid resource of every kind, with most fields used.
const example = `# a comment before the first document
apiVersion: strait.dev/v1alpha1
kind: Peer
metadata:
  name: west
  labels: {region: eu-west}
spec:
  gateways: ["10.0.1.10:4443", "gw.west.example:4443", "[fd00::1]:4443"]
  dataPlane: packet
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: echo
  labels: {app: echo, tier: backend}
  annotations: {note: "anything: goes"}
spec:
  target: 127.0.0.1:8080
  ports:
  - {name: http, protocol: TCP, port: 80}
  - {name: grpc, port: 9090, appProtocol: grpc, target: "127.0.0.1:9091"}
---
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: echo, namespace: shop}
spec:
  ips: [10.96.0.10]
  ports: [{port: 80}]
  clusters: [{cluster: west}, {cluster: east}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: db, namespace: shop}
spec:
  type: Headless
status:
  clusters: [{cluster: west}]
---
apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: shop-from-west}
spec:
  priority: 10
  action: allow
  from:
    clusters: [west]
    namespaces: [shop]
    workloadSelector:
      matchLabels: {app: frontend}
      matchExpressions:
      - {key: env, operator: In, values: [prod, staging]}
      - {key: debug, operator: DoesNotExist}
  to:
    exports: [echo]
    exportSelector:
      matchExpressions: [{key: tier, operator: NotIn, values: [internal]}]
`

func TestParseExample(t *testing.T) {
	rs, err := Parse(strings.NewReader(example))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range rs {
		keys = append(keys, r.Key().String())
	}
	want := []string{"Peer west", "ServiceExport default/echo", "ServiceImport shop/echo", "ServiceImport shop/db", "AccessPolicy shop-from-west"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	exp := rs[1].(*ServiceExport)
	if exp.Spec.Ports[1].Protocol != TCP || exp.APIVersion != MCSAPIVersion {
		t.Errorf("defaults not filled: %+v", exp)
	}
	imp := rs[2].(*ServiceImport)
	if imp.Spec.Type != ClusterSetIP || !reflect.DeepEqual(imp.SourceClusters(), []string{"west", "east"}) {
		t.Errorf("import %+v, sources %v", imp.Spec, imp.SourceClusters())
	}
	if got := rs[3].(*ServiceImport).SourceClusters(); !reflect.DeepEqual(got, []string{"west"}) {
		t.Errorf("status.clusters: sources %v", got)
	}
	roundTrip(t, rs)
}

// roundTrip checks that rs survive YAML and JSON encoding unchanged.
func roundTrip(t testing.TB, rs []Resource) {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, rs); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	again, err := Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(rs, again) {
		t.Fatalf("YAML round trip changed the resources:\n%s", buf.String())
	}
	for _, r := range rs {
		data, err := EncodeJSON(r)
		if err != nil {
			t.Fatalf("EncodeJSON: %v", err)
		}
		back, err := DecodeJSON(data)
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", data, err)
		}
		if !reflect.DeepEqual(r, back) {
			t.Fatalf("JSON round trip changed %s:\n%s", r.Key(), data)
		}
	}
}

const (
	peerHead   = "apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: west}\n"
	exportHead = "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: echo}\n"
	importHead = "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: echo}\n"
	policyHead = "apiVersion: strait.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: p}\n"
	// workloadHead has labels: they are what policies select.
	workloadHead = "apiVersion: strait.dev/v1alpha1\nkind: Workload\nmetadata: {name: web-0, namespace: shop, labels: {role: blocked}}\n"
)

// TestWorkload: a workload parses with its namespace, labels and
// addresses; every malformed address is refused with its field and the
// fix, since the gateway looks addresses up exactly.
func TestWorkload(t *testing.T) {
	rs, err := Parse(strings.NewReader(workloadHead + "spec: {addresses: [10.1.2.3, \"fd00::7\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, ok := rs[0].(*Workload)
	if !ok || w.Key() != (Key{KindWorkload, "shop", "web-0"}) || w.Metadata.Labels["role"] != "blocked" ||
		!reflect.DeepEqual(w.Spec.Addresses, []string{"10.1.2.3", "fd00::7"}) {
		t.Fatalf("parsed %#v", rs[0])
	}
	roundTrip(t, rs)
	rs, err = Parse(strings.NewReader("apiVersion: strait.dev/v1alpha1\nkind: Workload\nmetadata: {name: w}\nspec: {addresses: [10.0.0.1]}\n"))
	if err != nil || rs[0].Key().Namespace != "default" {
		t.Errorf("namespace default: %v, %v", rs, err)
	}
	for _, tt := range []struct{ spec, want string }{
		{"spec: {}", "spec.addresses: required"},
		{"spec: {addresses: []}", "spec.addresses: required"},
		{"spec: {addresses: [10.0.0.300]}", `spec.addresses[0]: "10.0.0.300" is not an IP address`},
		{"spec: {addresses: [\"fe80::1%eth0\"]}", `spec.addresses[0]: "fe80::1%eth0" is not an IP address`},
		{"spec: {addresses: [\"10.0.0.0/8\"]}", `spec.addresses[0]: "10.0.0.0/8" is not an IP address`},
		{"spec: {addresses: [\"::ffff:10.0.0.1\"]}", "IPv4-mapped IPv6 address: write 10.0.0.1"},
		{"spec: {addresses: [\"FD00:0::7\"]}", "not in canonical form: write fd00::7"},
		{"spec: {addresses: [10.0.0.1, 10.0.0.1]}", `spec.addresses[1]: duplicate "10.0.0.1"`},
		{"spec: {addresses: [10.0.0.1], ports: [1]}", "spec.ports: unknown field"},
	} {
		_, err := Parse(strings.NewReader(workloadHead + tt.spec + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "Workload shop/web-0") {
			t.Errorf("%s: %v, want an error naming Workload shop/web-0 and %q", tt.spec, err, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"export target not host:port", peerHead + "spec: {gateways: [a:1]}\n---\n" + exportHead + "spec: {target: x}\n",
			[]string{`document 2 (ServiceExport default/echo): spec.target: "x" is not host:port`}},
		{"unknown field with line", exportHead + "spec:\n  target: a:1\n  tagret: b\n",
			[]string{"document 1 (ServiceExport default/echo): spec.tagret: unknown field (line 6; allowed: ports, target)"}},
		{"unknown nested field", exportHead + "spec:\n  target: a:1\n  ports:\n  - port: 80\n    prot: TCP\n",
			[]string{"spec.ports[0].prot: unknown field (line 8"}},
		{"unknown top-level field", exportHead + "spce: {}\n", []string{"document 1 (ServiceExport default/echo): spce: unknown field (line 4; allowed: apiVersion, kind, metadata, spec)"}},
		{"wrong type", policyHead + "spec:\n  priority: high\n  action: allow\n", []string{"spec.priority: cannot unmarshal", "(line 5)"}},
		{"duplicate key", policyHead + "spec: {priority: 1, action: allow, action: deny}\n", []string{"document 1 (AccessPolicy p)", `"action" already defined`}},
		{"missing kind", "apiVersion: v1\nmetadata: {name: x}\n", []string{"document 1: kind: required: one of Peer, ServiceExport, ServiceImport, AccessPolicy"}},
		{"unknown kind", "apiVersion: v1\nkind: Service\n", []string{`document 1: kind: "Service" is not one of`}},
		{"wrong apiVersion", "apiVersion: v1\nkind: Peer\nmetadata: {name: west}\nspec: {gateways: [a:1]}\n", []string{`document 1 (Peer west): apiVersion: "v1" is not strait.dev/v1alpha1`}},
		{"not a mapping", "- a\n- b\n", []string{"document 1: want a mapping"}},
		{"syntax error", "a: [\n", []string{"document 1:"}},
		{"peer without gateways", peerHead + "spec: {}\n", []string{"spec.gateways: required"}},
		{"peer bad name", "apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: West_1}\nspec: {gateways: [a:1]}\n", []string{`metadata.name: "West_1" is not a DNS label`}},
		{"peer namespaced", "apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: w, namespace: x}\nspec: {gateways: [a:1]}\n", []string{"metadata.namespace: must be empty: Peer is cluster-scoped"}},
		{"peer bad port", peerHead + "spec: {gateways: [\"a:0\", \"b:99999\", \"c:http\", \"a:0\"]}\n", []string{"spec.gateways[0]", "spec.gateways[1]", "spec.gateways[2]", `spec.gateways[3]: duplicate`}},
		{"peer bad host", peerHead + "spec: {gateways: [\"a_b:1\", \":1\"]}\n", []string{`spec.gateways[0]: "a_b:1": host "a_b"`, `spec.gateways[1]: ":1" is not host:port`}},
		{"peer bad data plane", peerHead + "spec: {gateways: [a:1], dataPlane: kernel}\n", []string{`spec.dataPlane: "kernel" is not one of stream, packet (or empty: the gateway's configuration decides)`}},
		{"export name starts with digit", "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: 1echo, namespace: Shop}\nspec: {target: a:1}\n",
			[]string{`document 1 (ServiceExport Shop/1echo): metadata.name: "1echo" is not a service name`, `metadata.namespace: "Shop" is not a DNS label`}},
		{"export bad labels", "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: e, labels: {\"-bad\": x, \"ok/\": y, good: \"bad value\"}}\nspec: {target: a:1}\n",
			[]string{`key "-bad"`, `key "ok/"`, `metadata.labels[good]: "bad value" is not a label value`}},
		{"export ports", exportHead + "spec:\n  target: a:1\n  ports: [{port: 80}, {port: 0, protocol: ICMP}, {name: a, port: 1}, {name: a, port: 2}]\n",
			[]string{"spec.ports[0].name: required when there is more than one port", `spec.ports[1].protocol: "ICMP" is not one of TCP, UDP, SCTP`,
				"spec.ports[1].port: 0 is not in 1..65535", `spec.ports[3].name: duplicate port name "a"`}},
		{"export port targets", exportHead + "spec:\n  ports: [{name: a, port: 80, target: x}, {name: b, port: 80}, {name: c, port: 80, protocol: UDP, target: \"h:1\"}, {name: d, port: 81, target: \"h:0\"}]\n",
			[]string{`spec.ports[0].target: "x" is not host:port`, "spec.ports[1].port: duplicate port 80/TCP (also spec.ports[0])",
				`spec.ports[3].target: "h:0": port "0" is not a number`, "spec.target: required: host:port, unless every port in spec.ports has a target of its own"}},
		{"export without any target", exportHead + "spec: {}\n", []string{"spec.target: required"}},
		{"import port target", importHead + "spec: {ports: [{name: a, port: 1, target: \"h:1\"}, {name: b, port: 1, protocol: TCP}]}\n",
			[]string{"spec.ports[0].target: only an export's ports have a target", "spec.ports[1].port: duplicate port 1/TCP (also spec.ports[0])"}},
		{"import without ports", importHead + "spec: {}\n", []string{"spec.ports: required"}},
		{"import bad type", importHead + "spec: {type: LoadBalancer, ports: [{port: 1}]}\n", []string{`spec.type: "LoadBalancer" is not one of ClusterSetIP, Headless`}},
		{"import headless with ips", importHead + "spec: {type: Headless, ips: [10.0.0.1]}\n", []string{"spec.ips: must be empty for type Headless"}},
		{"import bad ips", importHead + "spec: {ips: [10.0.0.1, 10.0.0.2, nope], ports: [{port: 1}]}\n", []string{`spec.ips[2]: "nope" is not an IP address`, "spec.ips: at most one IPv4"}},
		{"import clusters twice", importHead + "spec: {ports: [{port: 1}], clusters: [{cluster: a}]}\nstatus: {clusters: [{cluster: b}]}\n", []string{"set spec.clusters or status.clusters, not both"}},
		{"import bad cluster", importHead + "spec: {ports: [{port: 1}], clusters: [{cluster: A}, {cluster: b}, {cluster: b}]}\n", []string{`spec.clusters[0].cluster: "A" is not a DNS label`, `spec.clusters[2].cluster: duplicate "b"`}},
		{"policy priority and action", policyHead + "spec: {priority: -1}\n", []string{"spec.priority: -1 is not in 0..1000", "spec.action: required: allow or deny"}},
		{"policy bad action", policyHead + "spec: {priority: 1, action: permit}\n", []string{`spec.action: "permit" is not one of allow, deny`}},
		{"policy selectors", policyHead + `spec:
  priority: 1
  action: deny
  from:
    clusters: [West]
    namespaces: [a, a]
    workloadSelector:
      matchExpressions:
      - {key: a, operator: In}
      - {key: b, operator: Exists, values: [x]}
      - {key: c, operator: Like, values: [x]}
  to:
    exports: [Echo]
    exportSelector: {matchLabels: {"a/b/c": x}}
`, []string{`spec.from.clusters[0]: "West" is not a DNS label`, `spec.from.namespaces[1]: duplicate "a"`,
			"spec.from.workloadSelector.matchExpressions[0].values: required: at least one value for operator In",
			"spec.from.workloadSelector.matchExpressions[1].values: must be empty for operator Exists",
			`spec.from.workloadSelector.matchExpressions[2].operator: "Like" is not one of In, NotIn, Exists, DoesNotExist`,
			`spec.to.exports[0]: "Echo" is not a service name`, `spec.to.exportSelector.matchLabels: key "a/b/c"`}},
		{"errors of several documents", peerHead + "spec: {}\n---\n" + policyHead + "spec: {priority: 1}\n",
			[]string{"document 1 (Peer west): spec.gateways", "document 2 (AccessPolicy p): spec.action"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Parse succeeded with %d resources", len(rs))
			}
			if rs != nil {
				t.Errorf("Parse returned resources with an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "---\n---\n", "--- null\n"} {
		rs, err := Parse(strings.NewReader(in))
		if err != nil || len(rs) != 0 {
			t.Errorf("Parse(%q) = %d, %v; want nothing", in, len(rs), err)
		}
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for _, in := range []string{
		`{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":["a:1"]},"extra":1}`,
		`{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":[]}}`,
		`{"apiVersion":"v1","kind":"Peer"}`,
		`{"kind":"Nope"}`,
		`{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":["a:1"]}} {}`,
		`[`,
	} {
		if _, err := DecodeJSON([]byte(in)); err == nil {
			t.Errorf("DecodeJSON(%s) succeeded", in)
		}
	}
}

func parseOne(t *testing.T, in string) Resource {
	t.Helper()
	rs, err := Parse(strings.NewReader(in))
	if err != nil || len(rs) != 1 {
		t.Fatalf("Parse = %d, %v", len(rs), err)
	}
	return rs[0]
}

func TestSet(t *testing.T) {
	var s Set
	peer := &Peer{Metadata: ObjectMeta{Name: "west"}, Spec: PeerSpec{Gateways: []string{"a:1"}}}
	if changed, err := s.Apply(peer); err != nil || !changed || s.Revision() != 1 {
		t.Fatalf("Apply = %v, %v, revision %d", changed, err, s.Revision())
	}
	// Equal after defaults: no change, same revision.
	same := parseOne(t, peerHead+"spec: {gateways: [a:1]}\n")
	if changed, err := s.Apply(same); err != nil || changed || s.Revision() != 1 {
		t.Fatalf("re-Apply = %v, %v, revision %d; want unchanged", changed, err, s.Revision())
	}
	// The set holds a copy.
	peer.Spec.Gateways[0] = "b:2"
	got, ok := s.Get(Key{KindPeer, "", "west"})
	if !ok || got.(*Peer).Spec.Gateways[0] != "a:1" {
		t.Fatalf("Get = %+v, %v", got, ok)
	}
	got.(*Peer).Spec.Gateways[0] = "c:3"
	if again, _ := s.Get(got.Key()); again.(*Peer).Spec.Gateways[0] != "a:1" {
		t.Fatal("Get returned the stored value, not a copy")
	}
	if changed, _ := s.Apply(peer); !changed || s.Revision() != 2 {
		t.Fatalf("replace: changed %v, revision %d", changed, s.Revision())
	}
	if _, err := s.Apply(&Peer{Metadata: ObjectMeta{Name: "bad name"}}); err == nil || !strings.Contains(err.Error(), "Peer bad name: metadata.name") {
		t.Fatalf("Apply invalid = %v", err)
	}
	rs, _ := Parse(strings.NewReader(example))
	for _, r := range rs {
		if _, err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for _, r := range s.List() {
		keys = append(keys, r.Key().String())
	}
	want := []string{"Peer west", "ServiceExport default/echo", "ServiceImport shop/db", "ServiceImport shop/echo", "AccessPolicy shop-from-west"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("List = %q, want %q", keys, want)
	}
	if n := len(s.List(KindServiceImport)); n != 2 {
		t.Errorf("List(ServiceImport) has %d", n)
	}
	rev := s.Revision()
	if !s.Delete(Key{KindServiceImport, "shop", "db"}) || s.Delete(Key{KindServiceImport, "shop", "db"}) || s.Revision() != rev+1 {
		t.Errorf("Delete: revision %d, want %d", s.Revision(), rev+1)
	}
	if s.Len() != 4 {
		t.Errorf("Len = %d", s.Len())
	}
}

func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := Parse(strings.NewReader(example))
	if n, err := st.Apply(rs...); err != nil || n != len(rs) {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	if n, err := st.Apply(rs...); err != nil || n != 0 {
		t.Fatalf("Apply again = %d, %v; want 0", n, err)
	}
	// An invalid resource in a batch changes nothing.
	bad := &Peer{Metadata: ObjectMeta{Name: "east"}}
	good := &Peer{Metadata: ObjectMeta{Name: "north"}, Spec: PeerSpec{Gateways: []string{"n:1"}}}
	if _, err := st.Apply(good, bad); err == nil {
		t.Fatal("batch with an invalid resource applied")
	}
	if n, err := st.Delete(Key{KindPeer, "", "west"}, Key{KindPeer, "", "nope"}); err != nil || n != 1 {
		t.Fatalf("Delete = %d, %v", n, err)
	}
	want, rev := st.Set().List(), st.Set().Revision()

	// A restart finds the same resources and revision.
	st2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st2.Set().List(); !reflect.DeepEqual(got, want) || st2.Set().Revision() != rev {
		t.Fatalf("reopened store: %d resources at revision %d; want %d at %d", len(got), st2.Set().Revision(), len(want), rev)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("store file: %v, %v", fi, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if e.Name() != "catalog.json" && e.Name() != "catalog.json.journal" {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}

	// Corrupt files are reported and left alone.
	for name, content := range map[string]string{
		"truncated":        `{"revision": 3, "resources": [`,
		"invalid resource": `{"revision": 1, "resources": [{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":[]}}]}`,
		"unknown field":    `{"revision": 1, "resources": [], "x": 1}`,
		"duplicate": `{"revision": 1, "resources": [{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":["a:1"]}},` +
			`{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":["b:1"]}}]}`,
	} {
		p := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStore(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s: OpenStore = %v; want an error naming the file", name, err)
		}
		if data, _ := os.ReadFile(p); string(data) != content {
			t.Errorf("%s: the corrupt file was changed", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	// One seed per document: small seeds keep the fuzzer's minimization
	// of new inputs short.
	for _, doc := range strings.Split(example, "---\n") {
		f.Add([]byte(doc))
	}
	f.Add([]byte(peerHead + "spec: {gateways: [a:1]}\n"))
	f.Add([]byte(exportHead + "spec: {target: \"[::1]:80\", ports: [{port: 1}]}\n"))
	f.Add([]byte(policyHead + "spec: {priority: 0, action: deny, to: {exportSelector: {}}}\n"))
	f.Add([]byte(importHead + "spec: {ports: [{port: 1}]}\nstatus: {clusters: []}\n"))
	f.Add([]byte(exportHead + "spec: {ports: [{name: a, port: 1, target: \"h:1\"}, {name: b, port: 2, target: \"[::1]:2\"}]}\n"))
	f.Add([]byte(importHead + "spec: {ports: [{port: 1, target: \"h:1\"}]}\n"))
	f.Add([]byte(workloadHead + "spec: {addresses: [10.1.2.3, \"fd00::7\"]}\n"))
	f.Add([]byte(workloadHead + "spec: {addresses: [\"::ffff:10.0.0.1\", \"FD00::7\", \"fe80::1%eth0\", 10.1.2.3, 10.1.2.3]}\n"))
	f.Add([]byte("a: &x [*x]\n"))
	// Edges: nothing, cut short, ports and priorities past their types
	// and negative, invalid UTF-8.
	f.Add([]byte{})
	f.Add([]byte(exportHead + "spec: {target: \"[::1]:80\", ports: [{port: 1"))
	f.Add([]byte(exportHead + "spec: {target: \"10.0.0.1:99999999999999999999\", ports: [{port: 4294967297}, {port: 65536}]}\n"))
	f.Add([]byte(exportHead + "spec: {target: \"10.0.0.1:-1\", ports: [{port: -1}, {port: 0}]}\n"))
	f.Add([]byte(policyHead + "spec: {priority: 9223372036854775808, action: deny, to: {exportSelector: {}}}\n"))
	f.Add([]byte(policyHead + "spec: {priority: -1, action: allow, to: {exportSelector: {}}}\n"))
	f.Add([]byte(peerHead + "spec: {gateways: [\"\xff\xfe:1\"]}\nmetadata: {labels: {\xc3: x}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		roundTrip(t, rs)
		var s Set
		for _, r := range rs {
			if _, err := s.Apply(r); err != nil {
				t.Fatalf("Apply of a parsed resource: %v", err)
			}
		}
	})
}

// TestStoreChanges: a watcher gets only what changed after its revision,
// deletions included, wakes on the next change, and gets a reset when the
// store cannot tell (restarted, or a revision of another store).
func TestStoreChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	exp := func(name string) *ServiceExport {
		return &ServiceExport{Metadata: ObjectMeta{Name: name, Namespace: "ns"}, Spec: ServiceExportSpec{Target: "127.0.0.1:9"}}
	}
	names := func(rs []Resource) (out []string) {
		for _, r := range rs {
			out = append(out, r.Meta().Name)
		}
		return out
	}
	if _, err := st.Apply(exp("a"), exp("b"), &Peer{Metadata: ObjectMeta{Name: "west"}, Spec: PeerSpec{Gateways: []string{"a:1"}}}); err != nil {
		t.Fatal(err)
	}
	set := st.Set()
	ch, del, rev0, reset := set.Changes(0, KindServiceExport)
	if !reflect.DeepEqual(names(ch), []string{"a", "b"}) || del != nil || reset || rev0 != 3 {
		t.Fatalf("Changes(0) = %v %v rev %d reset %v", names(ch), del, rev0, reset)
	}
	wake := set.Wait(rev0)
	select {
	case <-wake:
		t.Fatal("Wait fired before a change")
	default:
	}
	if _, err := st.Apply(exp("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(Key{KindServiceExport, "ns", "a"}); err != nil {
		t.Fatal(err)
	}
	<-wake
	ch, del, rev, reset := set.Changes(rev0, KindServiceExport)
	if !reflect.DeepEqual(names(ch), []string{"c"}) || !reflect.DeepEqual(del, []Key{{KindServiceExport, "ns", "a"}}) || reset || rev != rev0+2 {
		t.Fatalf("Changes(%d) = %v %v rev %d reset %v", rev0, names(ch), del, rev, reset)
	}
	if ch, del, _, _ := set.Changes(rev); len(ch) != 0 || len(del) != 0 {
		t.Fatalf("Changes at the current revision = %v %v", ch, del)
	}
	if _, _, _, reset := set.Changes(rev + 5); !reset {
		t.Fatal("a revision from the future is not a reset")
	}
	// Restarted: the same revision means nothing changed; an older one is a reset.
	st2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if ch, del, r, reset := st2.Set().Changes(rev); len(ch) != 0 || del != nil || reset || r != rev {
		t.Fatalf("after restart, Changes(%d) = %v %v rev %d reset %v", rev, ch, del, r, reset)
	}
	if ch, _, _, reset := st2.Set().Changes(rev0, KindServiceExport); !reset || !reflect.DeepEqual(names(ch), []string{"b", "c"}) {
		t.Fatalf("after restart, Changes(%d) = %v reset %v; want a reset with everything", rev0, names(ch), reset)
	}
}

// TestStoreJournal: changes go to the journal (one line each, the
// snapshot untouched), a restart replays them, a line torn by a crash is
// dropped, and a journal larger than the snapshot is folded into it.
func TestStoreJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	exp := func(name, target string) *ServiceExport {
		return &ServiceExport{Metadata: ObjectMeta{Name: name, Namespace: "ns"}, Spec: ServiceExportSpec{Target: target}}
	}
	if _, err := st.Apply(exp("a", "127.0.0.1:1")); err != nil { // the first change writes the snapshot
		t.Fatal(err)
	}
	snap, _ := os.ReadFile(path)
	if _, err := st.Apply(exp("b", "127.0.0.1:2"), exp("a", "127.0.0.1:3")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(Key{KindServiceExport, "ns", "b"}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, snap) {
		t.Fatal("a change rewrote the snapshot")
	}
	journal, _ := os.ReadFile(path + ".journal")
	if n := bytes.Count(journal, []byte("\n")); n != 2 {
		t.Fatalf("journal has %d lines, want 2:\n%s", n, journal)
	}
	want, rev := st.Set().List(), st.Set().Revision()
	reopen := func() *Store {
		t.Helper()
		st, err := OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st2 := reopen(); !reflect.DeepEqual(st2.Set().List(), want) || st2.Set().Revision() != rev {
		t.Fatalf("replayed: %v at %d, want %v at %d", st2.Set().List(), st2.Set().Revision(), want, rev)
	}
	// A torn last line (a change that never returned) is dropped.
	torn := append(append([]byte{}, journal...), []byte(`{"revision":99,"put":[{"apiVers`)...)
	if err := os.WriteFile(path+".journal", torn, 0o600); err != nil {
		t.Fatal(err)
	}
	st3 := reopen()
	if !reflect.DeepEqual(st3.Set().List(), want) || st3.Set().Revision() != rev {
		t.Fatalf("torn tail: %v at %d", st3.Set().List(), st3.Set().Revision())
	}
	// The next change folds everything into a snapshot.
	if _, err := st3.Apply(exp("c", "127.0.0.1:4")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path + ".journal"); fi.Size() != 0 {
		t.Fatalf("journal not emptied after a torn tail: %d bytes", fi.Size())
	}
	if st4 := reopen(); st4.Set().Len() != 2 || st4.Set().Revision() != rev+1 {
		t.Fatalf("after folding: %d resources at %d", st4.Set().Len(), st4.Set().Revision())
	}
	// Corruption before the last line is an error naming the journal.
	bad := append([]byte("{\"revision\": \"x\"}\n"), journal...)
	if err := os.WriteFile(path+".journal", bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path); err == nil || !strings.Contains(err.Error(), ".journal is corrupt") {
		t.Fatalf("corrupt journal: %v", err)
	}
	// A journal larger than the snapshot is folded into it.
	defer func(m int64) { minJournal = m }(minJournal)
	minJournal = 4 << 10
	os.Remove(path + ".journal")
	st5 := reopen()
	for i := 0; st5.jsize <= max(minJournal, st5.snapSize); i++ {
		if _, err := st5.Apply(exp(fmt.Sprintf("x%d", i%50), fmt.Sprintf("127.0.0.1:%d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st5.Apply(exp("last", "127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	if st5.jsize != 0 {
		t.Fatalf("journal of %d bytes not folded", st5.jsize)
	}
	if st6 := reopen(); !reflect.DeepEqual(st6.Set().List(), st5.Set().List()) {
		t.Fatal("folded store differs after a restart")
	}
}

// FuzzStoreJournal: whatever the journal holds, opening the store never
// panics, and what it loads is valid.
func FuzzStoreJournal(f *testing.F) {
	f.Add([]byte(`{"revision":2,"put":[{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"w"},"spec":{"gateways":["a:1"]}}]}` + "\n"))
	f.Add([]byte(`{"revision":3,"delete":[{"kind":"Peer","name":"w"}]}` + "\n{\"rev"))
	f.Add([]byte("\n\n"))
	// Edges: nothing, revisions past uint64 and negative, invalid UTF-8,
	// a line cut short.
	f.Add([]byte{})
	f.Add([]byte(`{"revision":18446744073709551616,"delete":[{"kind":"Peer","name":"w"}]}` + "\n"))
	f.Add([]byte(`{"revision":-1,"delete":[{"kind":"Peer","name":"w"}]}` + "\n"))
	f.Add([]byte(`{"revision":2,"put":[{"apiVersion":"strait.dev/v1alpha1","kind":"Peer","metadata":{"name":"` + "\xff\xfe" + `"},"spec":{"gateways":["a:1"]}}]}` + "\n"))
	f.Add([]byte(`{"revision":2,"put":[{"apiVersion":"strait.dev/v1alpha1","kind":"Pe`))
	f.Fuzz(func(t *testing.T, journal []byte) {
		path := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(path+".journal", journal, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := OpenStore(path)
		if err != nil {
			return
		}
		for _, r := range st.Set().List() {
			if err := r.Validate(); err != nil {
				t.Fatalf("loaded an invalid resource: %v", err)
			}
		}
	})
}

// TestStoreApplyDecoded: resources applied as decoded are stored as Apply
// stores them (the same canonical encoding, so applying them the other way
// changes nothing, and the same listing), and survive a reopen.
func TestStoreApplyDecoded(t *testing.T) {
	rs, err := Parse(strings.NewReader(example))
	if err != nil {
		t.Fatal(err)
	}
	decode := func() []Resource {
		var out []Resource
		for _, r := range rs {
			b, err := EncodeJSON(r)
			if err != nil {
				t.Fatal(err)
			}
			d, err := DecodeJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	dir := t.TempDir()
	a, err := OpenStore(filepath.Join(dir, "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenStore(filepath.Join(dir, "b.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.ApplyDecoded(decode()...); err != nil || n != len(rs) {
		t.Fatalf("ApplyDecoded = %d, %v", n, err)
	}
	if n, err := a.Apply(rs...); err != nil || n != 0 {
		t.Fatalf("Apply after ApplyDecoded = %d, %v; want 0 changes", n, err)
	}
	if _, err := b.Apply(rs...); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ApplyDecoded(decode()...); err != nil || n != 0 {
		t.Fatalf("ApplyDecoded after Apply = %d, %v; want 0 changes", n, err)
	}
	var ea, eb bytes.Buffer
	if err := Encode(&ea, a.Set().List()); err != nil {
		t.Fatal(err)
	}
	if err := Encode(&eb, b.Set().List()); err != nil {
		t.Fatal(err)
	}
	if ea.String() != eb.String() {
		t.Fatalf("ApplyDecoded stored\n%s\nApply stored\n%s", ea.String(), eb.String())
	}
	re, err := OpenStore(filepath.Join(dir, "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if re.Set().Len() != len(rs) {
		t.Fatalf("reopened: %d resources, want %d", re.Set().Len(), len(rs))
	}
}

// TestChangesShared: the same resources and deletions as Changes, by
// key and content, since any revision.
func TestChangesShared(t *testing.T) {
	var s Set
	rs, err := Parse(strings.NewReader(example))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if _, err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	s.Delete(rs[0].Key())
	enc := func(rs []Resource) string {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Key().less(rs[j].Key()) })
		var b bytes.Buffer
		if err := Encode(&b, rs); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for since := uint64(0); since <= s.Revision(); since++ {
		c, d, rev, reset := s.Changes(since)
		cs, ds, revs, resets := s.ChangesShared(since)
		sort.Slice(ds, func(i, j int) bool { return ds[i].less(ds[j]) })
		if enc(c) != enc(cs) || fmt.Sprint(d) != fmt.Sprint(ds) || rev != revs || reset != resets {
			t.Errorf("since %d: ChangesShared differs from Changes", since)
		}
	}
}

// TestStorePutBatch: an apply of puts (changed in place once journaled)
// counts and revises as applying them one by one would, a key put twice in
// one batch included, and a restart replays exactly that state.
func TestStorePutBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	exp := func(name, target string) *ServiceExport {
		return &ServiceExport{Metadata: ObjectMeta{Name: name, Namespace: "ns"}, Spec: ServiceExportSpec{Target: target}}
	}
	if _, err := st.Apply(exp("a", "127.0.0.1:1")); err != nil { // the first change writes the snapshot
		t.Fatal(err)
	}
	since := st.Set().Revision()
	n, err := st.Apply(exp("a", "127.0.0.1:1"), exp("b", "127.0.0.1:2"), exp("b", "127.0.0.1:3"), exp("b", "127.0.0.1:3"), exp("c", "127.0.0.1:4"))
	if err != nil || n != 3 {
		t.Fatalf("Apply = %d, %v; want 3 changes (b twice, c)", n, err)
	}
	if rev := st.Set().Revision(); rev != since+3 {
		t.Fatalf("revision %d, want %d", rev, since+3)
	}
	changed, _, _, _ := st.Set().Changes(since)
	if len(changed) != 2 || changed[0].Meta().Name != "b" || changed[1].Meta().Name != "c" {
		t.Fatalf("changes since %d: %v, want b and c", since, changed)
	}
	if b, _ := st.Set().Get(Key{KindServiceExport, "ns", "b"}); b.(*ServiceExport).Spec.Target != "127.0.0.1:3" {
		t.Fatalf("b = %+v, want the batch's last", b)
	}
	if n, err := st.Apply(exp("c", "127.0.0.1:4")); err != nil || n != 0 {
		t.Fatalf("Apply of an equal resource = %d, %v; want 0", n, err)
	}
	want, rev := st.Set().List(), st.Set().Revision()
	st2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st2.Set().List(), want) || st2.Set().Revision() != rev {
		t.Fatalf("replayed: %v at %d, want %v at %d", st2.Set().List(), st2.Set().Revision(), want, rev)
	}
}

// TestStoreMassDeleteFreesTable: after 20 000 resources were applied and
// deleted in one call, leaving one, the set does not hold their map's
// table (a Go map never gives it back by itself): the live heap is back
// within 1 MiB of what it was before the apply, where the table alone
// was about 3.
func TestStoreMassDeleteFreesTable(t *testing.T) {
	st, err := OpenStore(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	rs := make([]Resource, n)
	keys := make([]Key, n)
	for i := range rs {
		e := &ServiceExport{Metadata: ObjectMeta{Name: "e" + strconv.Itoa(i), Namespace: "ns"}, Spec: ServiceExportSpec{Target: "127.0.0.1:1"}}
		rs[i], keys[i] = e, e.Key()
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	if _, err := st.Apply(rs...); err != nil {
		t.Fatal(err)
	}
	// One more, applied in place as a gateway's later applies are.
	if _, err := st.Apply(&ServiceExport{Metadata: ObjectMeta{Name: "kept", Namespace: "ns"}, Spec: ServiceExportSpec{Target: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	full := heap()
	if d, err := st.Delete(keys...); err != nil || d != n {
		t.Fatalf("Delete = %d, %v; want %d", d, err, n)
	}
	after := heap()
	t.Logf("live heap: %d KiB before, %d KiB with %d resources, %d KiB after deleting them", before>>10, full>>10, n, after>>10)
	if after > before+1<<20 {
		t.Fatalf("live heap %d KiB after the delete, want within 1 MiB of %d KiB", after>>10, before>>10)
	}
	if st.Set().Len() != 1 {
		t.Fatalf("%d resources left, want 1", st.Set().Len())
	}
	runtime.KeepAlive(rs) // measured in every heap figure alike
}
