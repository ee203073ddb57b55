package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxInput bounds what Parse reads: resource files are small, and a
// runaway pipe must not exhaust the gateway's memory.
const MaxInput = 16 << 20

// Parse reads a multi-document YAML stream (JSON is YAML too) of resources,
// validates each and fills in defaults (namespace "default", protocol TCP,
// type ClusterSetIP, apiVersion). It is strict: unknown fields, duplicate
// keys and wrong types are errors. Empty documents are skipped. Every error
// names the document (1-based position in the stream), its kind and name,
// and the field path; errors of all documents are reported, joined by
// newlines, and then no resource is returned.
func Parse(r io.Reader) ([]Resource, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read resources: %w", err)
	}
	if len(data) > MaxInput {
		return nil, fmt.Errorf("resources larger than %d bytes", MaxInput)
	}
	// Two passes over the same stream: the first yields node trees (kind,
	// name, and the positions needed to name fields in errors); the second
	// decodes strictly into the typed values. Strict decoding is only
	// available on a Decoder, not on yaml.Node.Decode, and decoding the
	// original bytes keeps line numbers true to the file.
	var nodes []*yaml.Node
	loose := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := loose.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %s", len(nodes)+1, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		nodes = append(nodes, &n)
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var out []Resource
	var problems []string
	for i, doc := range nodes {
		h := headerOf(doc)
		if h.empty {
			var skip yaml.Node
			_ = strict.Decode(&skip)
			continue
		}
		prefix := fmt.Sprintf("document %d", i+1)
		fail := func(format string, args ...any) {
			problems = append(problems, prefix+": "+fmt.Sprintf(format, args...))
		}
		if !h.mapping {
			var skip yaml.Node
			_ = strict.Decode(&skip)
			fail("want a mapping with apiVersion, kind, metadata and spec")
			continue
		}
		res := newOf(Kind(h.kind))
		if res == nil {
			var skip yaml.Node
			_ = strict.Decode(&skip)
			if h.kind == "" {
				fail("kind: required: one of %s", kindList())
			} else {
				fail("kind: %q is not one of %s", h.kind, kindList())
			}
			continue
		}
		k := res.Kind()
		name := h.name
		if k.Namespaced() {
			ns := h.namespace
			if ns == "" {
				ns = "default"
			}
			name = ns + "/" + name
		}
		prefix = fmt.Sprintf("document %d (%s %s)", i+1, k, name)
		if h.name == "" {
			prefix = fmt.Sprintf("document %d (%s)", i+1, k)
		}
		if err := strict.Decode(res); err != nil {
			for _, m := range yamlErrors(err, doc) {
				fail("%s", m)
			}
			continue
		}
		if want := k.APIVersion(); h.apiVersion != want {
			fail("apiVersion: %q is not %s (the apiVersion of %s)", h.apiVersion, want, k)
			continue
		}
		normalize(res)
		if err := res.Validate(); err != nil {
			var fe FieldErrors
			if errors.As(err, &fe) {
				for _, e := range fe {
					fail("%s", e.Error())
				}
			} else {
				fail("%v", err)
			}
			continue
		}
		out = append(out, res)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	return out, nil
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// header is what Parse needs to know of a document before decoding it.
type header struct {
	empty, mapping                    bool
	apiVersion, kind, name, namespace string
}

func headerOf(doc *yaml.Node) header {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return header{empty: true}
		}
		n = n.Content[0]
	}
	if n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return header{empty: true}
	}
	if n.Kind != yaml.MappingNode {
		return header{}
	}
	h := header{mapping: true}
	h.apiVersion = scalarAt(n, "apiVersion")
	h.kind = scalarAt(n, "kind")
	if m := valueAt(n, "metadata"); m != nil && m.Kind == yaml.MappingNode {
		h.name = scalarAt(m, "name")
		h.namespace = scalarAt(m, "namespace")
	}
	return h
}

func valueAt(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalarAt(m *yaml.Node, key string) string {
	if v := valueAt(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

var (
	unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	lineRE         = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// yamlKinds maps the Go types yaml.v3 names in errors to their YAML keys.
var yamlKinds = map[string]reflect.Type{}

func init() {
	for _, v := range []any{Peer{}, PeerSpec{}, ServiceExport{}, ServiceExportSpec{}, ServiceImport{},
		ServiceImportSpec{}, ServiceImportStatus{}, ClusterStatus{}, ServicePort{}, AccessPolicy{},
		AccessPolicySpec{}, Source{}, Target{}, LabelSelector{}, LabelSelectorRequirement{}, ObjectMeta{},
		Workload{}, WorkloadSpec{}} {
		t := reflect.TypeOf(v)
		yamlKinds[t.String()] = t
	}
}

// yamlErrors turns a yaml.v3 decoding error into messages that start with
// the field path, keeping the line number.
func yamlErrors(err error, doc *yaml.Node) []string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if sub := unknownFieldRE.FindStringSubmatch(m); sub != nil {
			line, _ := strconv.Atoi(sub[1])
			path := sub[2]
			if ps := pathsOf(doc, func(n *yaml.Node, isKey bool) bool { return isKey && n.Line == line && n.Value == sub[2] }); len(ps) > 0 {
				path = ps[0]
			}
			msg := fmt.Sprintf("%s: unknown field (line %d", path, line)
			if t, ok := yamlKinds[sub[3]]; ok {
				msg += "; allowed: " + strings.Join(yamlKeys(t), ", ")
			}
			out = append(out, msg+")")
			continue
		}
		if sub := lineRE.FindStringSubmatch(m); sub != nil {
			line, _ := strconv.Atoi(sub[1])
			// Name the field only when one value sits on that line; in
			// flow style ({a: 1, b: 2}) the line alone is more honest.
			ps := pathsOf(doc, func(n *yaml.Node, isKey bool) bool {
				return !isKey && n.Line == line && n.Kind == yaml.ScalarNode
			})
			if len(ps) == 1 {
				out = append(out, fmt.Sprintf("%s: %s (line %d)", ps[0], sub[2], line))
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// pathsOf returns the dotted paths of the nodes in doc that match accepts
// (keys are offered with isKey), in document order.
func pathsOf(doc *yaml.Node, match func(n *yaml.Node, isKey bool) bool) []string {
	var out []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
			return
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if match(k, true) {
					out = append(out, p)
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		}
		if path != "" && match(n, false) {
			out = append(out, path)
		}
	}
	walk(doc, "")
	return out
}

// yamlKeys lists the YAML keys of a struct type, following inline fields.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if strings.Contains(opts, "inline") {
			keys = append(keys, yamlKeys(f.Type)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// withTypeMeta returns a shallow copy of r with apiVersion and kind set, so
// encoding never mutates the caller's value.
func withTypeMeta(r Resource) Resource {
	var c Resource
	switch r := r.(type) {
	case *Peer:
		v := *r
		c = &v
	case *ServiceExport:
		v := *r
		c = &v
	case *ServiceImport:
		v := *r
		c = &v
	case *AccessPolicy:
		v := *r
		c = &v
	case *Workload:
		v := *r
		c = &v
	default:
		panic(fmt.Sprintf("catalog: unknown resource type %T", r))
	}
	*c.typeMeta() = TypeMeta{APIVersion: c.Kind().APIVersion(), Kind: string(c.Kind())}
	return c
}

// Encode writes resources as a multi-document YAML stream that Parse reads
// back to equal values.
func Encode(w io.Writer, rs []Resource) error {
	if len(rs) == 0 {
		return nil // yaml.v3 fails to close an encoder that wrote nothing
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	for _, r := range rs {
		if err := enc.Encode(withTypeMeta(r)); err != nil {
			return fmt.Errorf("encode %s: %w", r.Key(), err)
		}
	}
	return enc.Close()
}

// EncodeJSON encodes one resource as a JSON object with apiVersion and kind.
func EncodeJSON(r Resource) ([]byte, error) {
	return json.Marshal(withTypeMeta(r))
}

// DecodeJSON decodes and validates one resource encoded as JSON, strictly
// (unknown fields are errors), and fills in defaults as Parse does.
func DecodeJSON(data []byte) (Resource, error) {
	var tm TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, fmt.Errorf("decode resource: %w", err)
	}
	res := newOf(Kind(tm.Kind))
	if res == nil {
		return nil, fmt.Errorf("kind: %q is not one of %s", tm.Kind, kindList())
	}
	if want := res.Kind().APIVersion(); tm.APIVersion != want {
		return nil, fmt.Errorf("%s: apiVersion: %q is not %s", res.Kind(), tm.APIVersion, want)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(res); err != nil {
		return nil, fmt.Errorf("decode %s: %w", res.Kind(), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode %s: trailing data after the object", res.Kind())
	}
	normalize(res)
	if err := res.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", res.Key(), err)
	}
	return res, nil
}

// Check fills in r's defaults as DecodeJSON does and validates it: for
// decoders of other encodings (the gateway's binary admin wire), whose
// resources must end up exactly as DecodeJSON's would.
func Check(r Resource) error {
	normalize(r)
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s: %w", r.Key(), err)
	}
	return nil
}

// Clone returns a deep copy of r.
func Clone(r Resource) Resource {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("catalog: clone %s: %v", r.Key(), err)) // plain data always encodes
	}
	c := newOf(r.Kind())
	if err := json.Unmarshal(data, c); err != nil {
		panic(fmt.Sprintf("catalog: clone %s: %v", r.Key(), err))
	}
	*c.typeMeta() = *r.typeMeta()
	return c
}
