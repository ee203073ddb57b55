package broker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/strait-net/strait/catalog"
)

// Binary encodings (protocol 3). Snapshots and deltas are the bulk of
// what a broker sends: tens of thousands of exports, each decoded by every
// agent. As JSON that decoding was ~40% of an agent's CPU; as the compact
// encoding below it is a few length-prefixed copies. The broker stores an
// export's value in the same encoding (exportMarker first), so it copies
// stored bytes into frames without decoding them either.
//
// A frame whose first body byte is binEntries or binPublish is binary;
// every other frame is JSON (which starts with '{').
//
//	entries frame: binEntries, flags (1 snapshot, 2 more), uvarint rev,
//	               uvarint count, count × entry
//	entry:         str key, uvarint modRev, kind (0 deleted, 1 JSON value,
//	               2 export), and for kinds 1 and 2: uvarint length, value
//	export:        exportMarker, str namespace, str name, uvarint ports,
//	               ports × (str name, str protocol, str appProtocol,
//	               varint port), uvarint labels, labels × (str key, str value)
//	               in key order
//	str:           uvarint length, bytes
//
// Every length and count is checked against the bytes left before
// anything is allocated, and a decoder must consume its input exactly.
const (
	binEntries   = 0x01
	exportMarker = 0xE1

	flagSnapshot = 1
	flagMore     = 2

	entryDeleted = 0
	entryJSON    = 1
	entryExport  = 2
)

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodeExport is an export's stored value and its form on the wire.
func encodeExport(e Export) []byte {
	n := 8 + len(e.Namespace) + len(e.Name)
	for _, p := range e.Ports {
		n += 16 + len(p.Name) + len(p.Protocol) + len(p.AppProtocol)
	}
	for k, v := range e.Labels {
		n += 4 + len(k) + len(v)
	}
	return appendExport(make([]byte, 0, n), e)
}

func appendExport(b []byte, e Export) []byte {
	b = append(b, exportMarker)
	b = appendStr(b, e.Namespace)
	b = appendStr(b, e.Name)
	b = binary.AppendUvarint(b, uint64(len(e.Ports)))
	for _, p := range e.Ports {
		b = appendStr(b, p.Name)
		b = appendStr(b, string(p.Protocol))
		b = appendStr(b, p.AppProtocol)
		b = binary.AppendVarint(b, int64(p.Port))
	}
	b = binary.AppendUvarint(b, uint64(len(e.Labels)))
	if len(e.Labels) > 0 {
		keys := make([]string, 0, len(e.Labels))
		for k := range e.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = appendStr(b, k)
			b = appendStr(b, e.Labels[k])
		}
	}
	return b
}

// binReader decodes the primitives; the first error sticks.
type binReader struct {
	b   []byte
	err error
	// Frame-wide: strings that repeat across exports (namespaces, port
	// names, labels) are allocated once, and exports and ports in slabs,
	// so a frame of thousands of exports costs few allocations.
	intern  map[string]string
	exports []Export
	ports   []catalog.ServicePort
}

func (r *binReader) istr(what string) string {
	b := r.text(what)
	if len(b) == 0 {
		return ""
	}
	if s, ok := r.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if r.intern == nil {
		r.intern = map[string]string{}
	}
	if len(r.intern) < 4096 {
		r.intern[s] = s
	}
	return s
}

func (r *binReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *binReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("%s: truncated", what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *binReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items that take at least min bytes each.
func (r *binReader) count(what string, min int) int {
	n := r.uvarint(what)
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.fail("%s: %d items in %d bytes", what, n, len(r.b))
		return 0
	}
	return int(n)
}

// boundedCount is count for a list the protocol bounds: a decoded item
// takes many times its wire size, so the bound is checked before
// allocating, not after (a 4 MiB frame of 2-byte puts would otherwise
// cost 128 MiB).
func (r *binReader) boundedCount(what string, min, limit int) int {
	n := r.count(what, min)
	if n > limit {
		r.fail("%s: %d, at most %d", what, n, limit)
		return 0
	}
	return n
}

func (r *binReader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("%s: length %d, %d bytes left", what, n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *binReader) str(what string) string { return string(r.text(what)) }

// text is a string field's bytes, which must be UTF-8: the JSON encoding
// of the same message would otherwise turn invalid bytes into U+FFFD, and
// a frame would not say the same thing in both wires.
func (r *binReader) text(what string) []byte {
	b := r.bytes(what)
	if r.err == nil && !utf8.Valid(b) {
		r.fail("%s: not valid UTF-8", what)
		return nil
	}
	return b
}

// decodeExport decodes an export's binary value, all of data.
func decodeExport(data []byte) (Export, error) {
	r := &binReader{b: data}
	e := r.export("")
	if r.err == nil && len(r.b) > 0 {
		r.fail("export: %d bytes after it", len(r.b))
	}
	return e, r.err
}

// export decodes one export; key, if not empty, is the entry key it is
// stored under, whose tail usually holds the name (no copy then).
func (r *binReader) export(key string) Export {
	var e Export
	if m := r.byte("export"); r.err == nil && m != exportMarker {
		r.fail("export: starts with %#x, not %#x", m, exportMarker)
	}
	e.Namespace = r.istr("export namespace")
	if name := r.text("export name"); len(key) > len(name) && key[len(key)-len(name)-1] == '/' && key[len(key)-len(name):] == string(name) {
		e.Name = key[len(key)-len(name):]
	} else {
		e.Name = string(name)
	}
	if n := r.count("export ports", 4); n > 0 {
		if len(r.ports)+n > cap(r.ports) {
			r.ports = make([]catalog.ServicePort, 0, max(n, 1024))
		}
		e.Ports = r.ports[len(r.ports) : len(r.ports)+n : len(r.ports)+n]
		r.ports = r.ports[:len(r.ports)+n]
		for i := range e.Ports {
			p := &e.Ports[i]
			p.Name = r.istr("port name")
			p.Protocol = internProtocol(r.text("port protocol"))
			p.AppProtocol = r.istr("port appProtocol")
			v := r.varint("port")
			if r.err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
				r.fail("port %d: out of range", v)
			}
			p.Port = int32(v)
		}
	}
	if n := r.count("export labels", 2); n > 0 {
		e.Labels = make(map[string]string, n)
		for range n {
			k := r.istr("label key")
			e.Labels[k] = r.istr("label value")
		}
	}
	return e
}

// internProtocol avoids an allocation per port for the usual protocols.
func internProtocol(b []byte) catalog.Protocol {
	switch string(b) {
	case "":
		return ""
	case string(catalog.TCP):
		return catalog.TCP
	}
	return catalog.Protocol(b)
}

// appendEntriesFrame appends one binary entries frame body.
func appendEntriesFrame(b []byte, t string, rev uint64, more bool, entries []Entry) []byte {
	flags := byte(0)
	if t == msgSnapshot {
		flags |= flagSnapshot
	}
	if more {
		flags |= flagMore
	}
	b = append(b, binEntries, flags)
	b = binary.AppendUvarint(b, rev)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = appendStr(b, e.Key)
		b = binary.AppendUvarint(b, e.ModRev)
		switch {
		case len(e.Value) == 0:
			b = append(b, entryDeleted)
			continue
		case e.Value[0] == exportMarker:
			b = append(b, entryExport)
		default: // JSON: other kinds, or an export stored by protocol 2
			b = append(b, entryJSON)
		}
		b = binary.AppendUvarint(b, uint64(len(e.Value)))
		b = append(b, e.Value...)
	}
	return b
}

// entrySize bounds what an entry adds to a frame.
func entrySize(e Entry) int { return len(e.Key) + len(e.Value) + 3*binary.MaxVarintLen64 }

// decodeEntriesFrame decodes a binary entries frame's body into a snapshot
// or delta message (check then applies the same rules as to JSON).
func decodeEntriesFrame(data []byte) (*message, error) {
	r := &binReader{b: data}
	if r.byte("frame type") != binEntries {
		return nil, errors.New("not an entries frame")
	}
	flags := r.byte("flags")
	if r.err == nil && flags&^(flagSnapshot|flagMore) != 0 {
		r.fail("flags: %#x has unknown bits", flags)
	}
	m := &message{T: msgDelta, More: flags&flagMore != 0}
	if flags&flagSnapshot != 0 {
		m.T = msgSnapshot
	}
	m.Rev = r.uvarint("rev")
	n := r.boundedCount("entries", 3, snapshotChunk)
	if n > 0 {
		m.Entries = make([]wireEntry, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		e := &m.Entries[i]
		e.Key = r.str("entry key")
		e.ModRev = r.uvarint("entry revision")
		switch kind := r.byte("entry kind"); kind {
		case entryDeleted:
		case entryJSON:
			v := r.bytes("entry value")
			if r.err == nil && !json.Valid(v) {
				r.fail("entries[%d]: value is not JSON", i)
			}
			e.Value = json.RawMessage(v)
		case entryExport:
			v := r.bytes("entry export")
			if r.err != nil {
				break
			}
			if len(r.exports) == 0 {
				r.exports = make([]Export, min(n-i, 1024))
			}
			x := &r.exports[0]
			r.exports = r.exports[1:]
			sub := &binReader{b: v, intern: r.intern, ports: r.ports}
			*x = sub.export(e.Key)
			if sub.err == nil && len(sub.b) > 0 {
				sub.fail("export: %d bytes after it", len(sub.b))
			}
			if sub.err != nil {
				r.fail("entries[%d]: %v", i, sub.err)
				break
			}
			r.intern, r.ports = sub.intern, sub.ports
			e.Export = x
		default:
			r.fail("entries[%d]: kind %d is not 0, 1 or 2", i, kind)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes after the entries", len(r.b))
	}
	if r.err != nil {
		return nil, protoErr(CodeMalformed, "entries frame: %v", r.err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

// Publish frames (protocol 3) are binary too: a publish carries a
// cluster's exports, thousands at once when it starts, and the broker
// decoded them from JSON only to store them in the binary encoding.
//
//	publish frame: binPublish, uvarint seq, uvarint base, flags (1 cont,
//	               2 gateways), str cluster, [uvarint gateways,
//	               gateways × (str addr, healthy 0 or 1)], uvarint puts,
//	               puts × (uvarint length, export), uvarint dels, dels × str
const (
	binPublish = 0x02

	flagCont     = 1
	flagGateways = 2
)

func appendPublishFrame(b []byte, m *message) []byte {
	flags := byte(0)
	if m.Cont {
		flags |= flagCont
	}
	if m.Gateways != nil {
		flags |= flagGateways
	}
	b = append(b, binPublish)
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendUvarint(b, m.Base)
	b = append(b, flags)
	b = appendStr(b, m.Cluster)
	if m.Gateways != nil {
		b = binary.AppendUvarint(b, uint64(len(*m.Gateways)))
		for _, g := range *m.Gateways {
			b = appendStr(b, g.Addr)
			if g.Healthy {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(m.Put)))
	var x []byte
	for _, e := range m.Put {
		x = appendExport(x[:0], e)
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Del)))
	for _, k := range m.Del {
		b = appendStr(b, k)
	}
	return b
}

// exportWireSize is an export's size in a publish frame, for filling
// frames without encoding twice.
func exportWireSize(e Export) int {
	n := 2*binary.MaxVarintLen64 + len(e.Namespace) + len(e.Name)
	for _, p := range e.Ports {
		n += 4*binary.MaxVarintLen64 + len(p.Name) + len(p.Protocol) + len(p.AppProtocol)
	}
	for k, v := range e.Labels {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	return n
}

// decodePublishFrame decodes a binary publish frame's body; check then
// applies the same rules as to a JSON publish.
func decodePublishFrame(data []byte) (*message, error) {
	r := &binReader{b: data}
	if r.byte("frame type") != binPublish {
		return nil, errors.New("not a publish frame")
	}
	m := &message{T: msgPublish}
	m.Seq = r.uvarint("seq")
	m.Base = r.uvarint("base")
	flags := r.byte("flags")
	if r.err == nil && flags&^(flagCont|flagGateways) != 0 {
		r.fail("flags: %#x has unknown bits", flags)
	}
	m.Cont = flags&flagCont != 0
	m.Cluster = r.str("cluster")
	if flags&flagGateways != 0 {
		gws := make([]Gateway, r.boundedCount("gateways", 2, MaxGateways))
		for i := range gws {
			gws[i].Addr = r.str("gateway addr")
			switch h := r.byte("gateway healthy"); h {
			case 0, 1:
				gws[i].Healthy = h == 1
			default:
				r.fail("gateways[%d].healthy: %d is not 0 or 1", i, h)
			}
		}
		m.Gateways = &gws
	}
	if n := r.boundedCount("put", 2, MaxExportsPerFrame); n > 0 {
		m.Put = make([]Export, n)
		for i := 0; i < n && r.err == nil; i++ {
			v := r.bytes("put export")
			if r.err != nil {
				break
			}
			sub := &binReader{b: v, intern: r.intern, ports: r.ports}
			m.Put[i] = sub.export("")
			if sub.err == nil && len(sub.b) > 0 {
				sub.fail("export: %d bytes after it", len(sub.b))
			}
			if sub.err != nil {
				r.fail("put[%d]: %v", i, sub.err)
				break
			}
			r.intern, r.ports = sub.intern, sub.ports
		}
	}
	if n := r.boundedCount("del", 1, MaxExportsPerFrame); n > 0 {
		m.Del = make([]string, n)
		for i := range m.Del {
			m.Del[i] = r.str("del")
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes after the publish", len(r.b))
	}
	if r.err != nil {
		return nil, protoErr(CodeMalformed, "publish frame: %v", r.err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}
