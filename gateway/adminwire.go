package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/strait-net/strait/catalog"
)

// The admin API's binary body for applies and deletes (Content-Type
// ContentTypeResources). An agent applies every import of a clusterset to
// its gateway, thousands per call; decoding them from JSON was a third of
// the gateway's apply CPU (encoding/json's reflection and its strict
// second pass per resource), while this form is a few length-prefixed
// copies. ServiceImports and ServiceExports, the bulk, have records of
// their own; any other resource travels as its JSON inside the body.
// Decoded resources are normalized and validated exactly as
// catalog.DecodeJSON's are.
//
//	body:    magic "SR", version 1, uvarint count, count × record; nothing after
//	record:  tag 1 (JSON: str, one resource as catalog.DecodeJSON reads it),
//	         tag 2 (import) or tag 3 (export)
//	import:  meta, str type, list ips, ports, list spec.clusters,
//	         status (0 none, 1 then list clusters)
//	export:  meta, str target, ports
//	meta:    str namespace, str name, map labels, map annotations
//	ports:   uvarint n, n × (str name, str protocol, str appProtocol,
//	         varint port, str target)
//	map:     uvarint n, n × (str key, str value), keys strictly increasing
//	list:    uvarint n, n × str
//	str:     uvarint length, bytes
//
// Every count and length is checked against the bytes left before
// anything is allocated, and the body must be consumed exactly.
const ContentTypeResources = "application/x-strait-resources"

const (
	wireVersion = 1
	recJSON     = 1
	recImport   = 2
	recExport   = 3
)

var wireMagic = [2]byte{'S', 'R'}

// appendResources encodes resources as a binary admin body.
func appendResources(b []byte, rs []catalog.Resource) ([]byte, error) {
	b = append(b, wireMagic[0], wireMagic[1], wireVersion)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for _, r := range rs {
		var imp *catalog.ServiceImport
		switch r := r.(type) {
		case *catalog.ServiceImport:
			imp = r
		case *catalog.ServiceExport:
			b = append(b, recExport)
			b = appendWireMeta(b, &r.Metadata)
			b = appendWireStr(b, r.Spec.Target)
			b = appendWirePorts(b, r.Spec.Ports)
			continue
		default:
			j, err := catalog.EncodeJSON(r)
			if err != nil {
				return nil, err
			}
			b = append(b, recJSON)
			b = appendWireStr(b, string(j))
			continue
		}
		b = append(b, recImport)
		b = appendWireMeta(b, &imp.Metadata)
		b = appendWireStr(b, string(imp.Spec.Type))
		b = appendWireList(b, len(imp.Spec.IPs), func(i int) string { return imp.Spec.IPs[i] })
		b = appendWirePorts(b, imp.Spec.Ports)
		b = appendWireList(b, len(imp.Spec.Clusters), func(i int) string { return imp.Spec.Clusters[i].Cluster })
		if imp.Status == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendWireList(b, len(imp.Status.Clusters), func(i int) string { return imp.Status.Clusters[i].Cluster })
		}
	}
	return b, nil
}

func appendWireMeta(b []byte, m *catalog.ObjectMeta) []byte {
	b = appendWireStr(b, m.Namespace)
	b = appendWireStr(b, m.Name)
	b = appendWireMap(b, m.Labels)
	return appendWireMap(b, m.Annotations)
}

func appendWirePorts(b []byte, ps []catalog.ServicePort) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = appendWireStr(b, p.Name)
		b = appendWireStr(b, string(p.Protocol))
		b = appendWireStr(b, p.AppProtocol)
		b = binary.AppendVarint(b, int64(p.Port))
		b = appendWireStr(b, p.Target)
	}
	return b
}

func appendWireStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendWireList(b []byte, n int, at func(int) string) []byte {
	b = binary.AppendUvarint(b, uint64(n))
	for i := range n {
		b = appendWireStr(b, at(i))
	}
	return b
}

func appendWireMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendWireStr(b, k)
		b = appendWireStr(b, m[k])
	}
	return b
}

// decodeResourcesBinary reads a binary admin body: each resource decoded,
// normalized and validated as catalog.DecodeJSON does.
func decodeResourcesBinary(body []byte) ([]catalog.Resource, error) {
	d := wireDecoder{b: body}
	if len(body) < 3 || body[0] != wireMagic[0] || body[1] != wireMagic[1] {
		return nil, errors.New("decode resources: not a strait binary resource body (want magic \"SR\")")
	}
	if body[2] != wireVersion {
		return nil, fmt.Errorf("decode resources: binary body version %d, this gateway reads %d", body[2], wireVersion)
	}
	d.b = body[3:]
	n := d.count("resources", 2) // a tag and at least one byte
	out := make([]catalog.Resource, 0, min(n, 4096))
	for i := 0; i < n && d.err == nil; i++ {
		var r catalog.Resource
		switch tag := d.u8("record tag"); tag {
		case recJSON:
			j := d.str("resource JSON")
			if d.err != nil {
				break
			}
			res, err := catalog.DecodeJSON([]byte(j))
			if err != nil {
				return nil, fmt.Errorf("resource %d: %w", i, err)
			}
			r = res
		case recImport, recExport:
			if tag == recImport {
				r = d.serviceImport()
			} else {
				r = d.serviceExport()
			}
			if d.err != nil {
				break
			}
			if err := catalog.Check(r); err != nil {
				return nil, fmt.Errorf("resource %d: %w", i, err)
			}
		default:
			if d.err == nil {
				d.err = fmt.Errorf("record tag %d is not 1 (JSON), 2 (ServiceImport) or 3 (ServiceExport)", tag)
			}
		}
		if d.err != nil {
			return nil, fmt.Errorf("decode resources: resource %d: %w", i, d.err)
		}
		out = append(out, r)
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode resources: %w", d.err)
	}
	if len(d.b) > 0 {
		return nil, fmt.Errorf("decode resources: %d bytes after the last resource", len(d.b))
	}
	return out, nil
}

// wireDecoder reads the binary body; the first problem sticks in err and
// every later read returns zero values.
type wireDecoder struct {
	b   []byte
	err error
}

func (d *wireDecoder) fail(what, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %s", what, fmt.Sprintf(format, args...))
	}
}

func (d *wireDecoder) u8(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(what, "truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *wireDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what, "truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items of at least size bytes each: never more
// than the bytes left hold, so a forged count cannot make the decoder
// allocate beyond a small multiple of the body.
func (d *wireDecoder) count(what string, size int) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.b)/size) {
		d.fail(what, "count %d exceeds what the %d bytes left can hold", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *wireDecoder) str(what string) string {
	n := d.count(what, 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *wireDecoder) list(what string) []string {
	n := d.count(what, 1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str(what)
	}
	return out
}

func (d *wireDecoder) strMap(what string) map[string]string {
	n := d.count(what, 2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	prev := ""
	for i := range n {
		k := d.str(what + " key")
		if i > 0 && k <= prev {
			d.fail(what, "key %q out of order or repeated", k)
		}
		prev = k
		m[k] = d.str(what + " value")
	}
	return m
}

func (d *wireDecoder) clusters(what string) []catalog.ClusterStatus {
	names := d.list(what)
	if len(names) == 0 {
		return nil
	}
	out := make([]catalog.ClusterStatus, len(names))
	for i, c := range names {
		out[i].Cluster = c
	}
	return out
}

func (d *wireDecoder) meta(m *catalog.ObjectMeta) {
	m.Namespace = d.str("metadata.namespace")
	m.Name = d.str("metadata.name")
	m.Labels = d.strMap("metadata.labels")
	m.Annotations = d.strMap("metadata.annotations")
}

func (d *wireDecoder) serviceExport() *catalog.ServiceExport {
	e := &catalog.ServiceExport{}
	d.meta(&e.Metadata)
	e.Spec.Target = d.str("spec.target")
	e.Spec.Ports = d.ports()
	return e
}

func (d *wireDecoder) serviceImport() *catalog.ServiceImport {
	imp := &catalog.ServiceImport{}
	d.meta(&imp.Metadata)
	imp.Spec.Type = catalog.ServiceImportType(d.str("spec.type"))
	imp.Spec.IPs = d.list("spec.ips")
	imp.Spec.Ports = d.ports()
	imp.Spec.Clusters = d.clusters("spec.clusters")
	switch d.u8("status") {
	case 0:
	case 1:
		imp.Status = &catalog.ServiceImportStatus{Clusters: d.clusters("status.clusters")}
	default:
		d.fail("status", "marker is not 0 (none) or 1")
	}
	return imp
}

func (d *wireDecoder) ports() []catalog.ServicePort {
	var ps []catalog.ServicePort
	if n := d.count("spec.ports", 5); n > 0 { // four strings and a varint
		ps = make([]catalog.ServicePort, n)
		for i := range ps {
			p := &ps[i]
			p.Name = d.str("spec.ports name")
			p.Protocol = catalog.Protocol(d.str("spec.ports protocol"))
			p.AppProtocol = d.str("spec.ports appProtocol")
			if d.err == nil {
				v, n := binary.Varint(d.b)
				if n <= 0 || v < -1<<31 || v > 1<<31-1 {
					d.fail("spec.ports port", "truncated varint or not a 32-bit number")
				} else {
					d.b = d.b[n:]
					p.Port = int32(v)
				}
			}
			p.Target = d.str("spec.ports target")
		}
	}
	return ps
}
