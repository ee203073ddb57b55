package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
)

func entriesBody(t string, rev uint64, more bool, entries ...Entry) []byte {
	return appendEntriesFrame(nil, t, rev, more, entries)
}

func TestExportRoundTrip(t *testing.T) {
	in := Export{Namespace: "ns", Name: "svc", Ports: []catalog.ServicePort{{Name: "http", Protocol: catalog.TCP, AppProtocol: "h2", Port: 80}, {Port: 53, Protocol: "UDP"}},
		Labels: map[string]string{"b": "2", "a": "1"}}
	out, err := decodeExport(encodeExport(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	if !bytes.Equal(encodeExport(in), encodeExport(out)) {
		t.Fatal("labels not encoded in key order")
	}
}

// TestEntriesFrameRejects: each malformed binary frame is refused with
// a reason naming what is wrong.
func TestEntriesFrameRejects(t *testing.T) {
	good := encodeExport(Export{Namespace: "d", Name: "x"})
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"truncated", "bytes left", entriesBody(msgDelta, 1, false, Entry{Key: "c/a/gw", Value: []byte(`[]`), ModRev: 1})[:8]},
		{"flags", "unknown bits", []byte{binEntries, 0x80, 1, 0}},
		{"huge count", "items in", []byte{binEntries, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"huge length", "length", []byte{binEntries, 0, 1, 1, 0xff, 0xff, 0x03, 'k'}},
		{"kind", "kind 7", []byte{binEntries, 0, 1, 1, 1, 'k', 1, 7}},
		{"not json", "not JSON", []byte{binEntries, 0, 1, 1, 1, 'k', 1, entryJSON, 1, '{'}},
		{"not an export", "starts with", []byte{binEntries, 0, 1, 1, 1, 'k', 1, entryExport, 1, '{'}},
		{"trailing", "after the entries", append(entriesBody(msgDelta, 1, false), 0)},
		{"export under another key", "entries[0].x", entriesBody(msgDelta, 1, false, Entry{Key: exportKey("a", "d/y"), Value: good, ModRev: 1})},
		{"export under a gateway key", "entries[0].x", entriesBody(msgDelta, 1, false, Entry{Key: gwKey("a"), Value: good, ModRev: 1})},
		{"empty key", "entries[0].k", entriesBody(msgDelta, 1, false, Entry{Key: "", ModRev: 1})},
		{"too many entries", "at most 5000", append(binary.AppendUvarint([]byte{binEntries, 0, 1}, snapshotChunk+1), make([]byte, 3*(snapshotChunk+1))...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readFrame(bufio.NewReader(bytes.NewReader(frameBytes(string(tc.body)))))
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != CodeMalformed || !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("got %v, want malformed containing %q", err, tc.want)
			}
		})
	}
}

// TestEncodeEntriesChunks: a snapshot larger than one frame is split, More
// set on all but the last frame, and nothing lost.
func TestEncodeEntriesChunks(t *testing.T) {
	var entries []Entry
	for i := range 2*snapshotChunk + 3 {
		ex := Export{Namespace: "d", Name: "s" + strings.Repeat("x", i%7) + string(rune('a'+i%26)), Ports: []catalog.ServicePort{{Port: int32(1 + i)}}}
		entries = append(entries, Entry{Key: exportKey("c", ex.Key()) + "-" + string(rune('0'+i%10)), Value: []byte(`{}`), ModRev: uint64(i + 1)})
	}
	var buf bytes.Buffer
	if err := encodeEntries(&buf, msgSnapshot, 99, entries); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&buf)
	var got []wireEntry
	frames := 0
	for {
		m, err := readFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		frames++
		if m.T != msgSnapshot || m.Rev != 99 {
			t.Fatalf("frame %d: %s rev %d", frames, m.T, m.Rev)
		}
		got = append(got, m.Entries...)
		if !m.More {
			break
		}
	}
	if frames != 3 || len(got) != len(entries) || got[len(got)-1].ModRev != uint64(len(entries)) {
		t.Fatalf("%d frames, %d entries, want 3 and %d", frames, len(got), len(entries))
	}
}

// toEntries turns a decoded message back into what a broker encodes.
func toEntries(m *message) []Entry {
	out := make([]Entry, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = Entry{Key: e.Key, ModRev: e.ModRev, Value: e.Value}
		if e.Export != nil {
			out[i].Value = encodeExport(*e.Export)
		}
	}
	return out
}

// FuzzEntriesFrame: the binary decoder never panics, and what it accepts
// encodes and decodes to the same message.
func FuzzEntriesFrame(f *testing.F) {
	f.Add(entriesBody(msgDelta, 9, false,
		Entry{Key: exportKey("a", "d/x"), Value: encodeExport(Export{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80}}, Labels: map[string]string{"k": "v"}}), ModRev: 9},
		Entry{Key: exportKey("a", "d/y"), ModRev: 9},
		Entry{Key: gwKey("a"), Value: []byte(`[{"addr":"1.2.3.4:5"}]`), ModRev: 9}))
	f.Add(entriesBody(msgSnapshot, 3, true))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) == 0 || body[0] != binEntries {
			return // readFrame takes such a frame for JSON
		}
		m, err := decodeEntriesFrame(body)
		if err != nil {
			return
		}
		again, err := decodeEntriesFrame(appendEntriesFrame(nil, m.T, m.Rev, m.More, toEntries(m)))
		if err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("not stable:\n%+v\n%+v", m, again)
		}
	})
}

// FuzzDecodeExport: an export value decodes without panicking, and what
// decodes re-encodes to a value that decodes to the same export.
func FuzzDecodeExport(f *testing.F) {
	f.Add(encodeExport(Export{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Name: "p", Protocol: catalog.TCP, Port: 1}}, Labels: map[string]string{"a": "b"}}))
	f.Add([]byte{exportMarker, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decodeExport(data)
		if err != nil {
			return
		}
		e2, err := decodeExport(encodeExport(e))
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, e, e2)
		}
	})
}

func TestSameExport(t *testing.T) {
	base := Export{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80}}, Labels: map[string]string{"a": "1"}}
	same := Export{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80, Protocol: catalog.TCP}}, Labels: map[string]string{"a": "1"}}
	if !sameExport(base, same) || !sameExport(Export{Name: "x", Labels: map[string]string{}}, Export{Name: "x"}) {
		t.Fatal("equal exports differ")
	}
	for i, other := range []Export{
		{Namespace: "e", Name: "x", Ports: base.Ports, Labels: base.Labels},
		{Namespace: "d", Name: "y", Ports: base.Ports, Labels: base.Labels},
		{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 81}}, Labels: base.Labels},
		{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80, Protocol: "UDP"}}, Labels: base.Labels},
		{Namespace: "d", Name: "x", Ports: base.Ports, Labels: map[string]string{"a": "2"}},
		{Namespace: "d", Name: "x", Ports: base.Ports, Labels: map[string]string{"b": "1"}},
		{Namespace: "d", Name: "x", Labels: base.Labels},
	} {
		if sameExport(base, other) || sameExport(other, base) {
			t.Errorf("case %d: %+v equals %+v", i, other, base)
		}
	}
}

func publishBody(m *message) []byte { return appendPublishFrame(nil, m) }

// TestPublishFrameRejects: malformed binary publishes are refused with a
// reason, and the publish rules (check) apply to them as to JSON.
func TestPublishFrameRejects(t *testing.T) {
	ok := &message{T: msgPublish, Seq: 1, Cluster: "a", Put: exportsN("x", 2), Del: []string{"default/y"}}
	good := publishBody(ok)
	if m, err := decodePublishFrame(good); err != nil || len(m.Put) != 2 || m.Del[0] != "default/y" || m.Gateways != nil {
		t.Fatalf("good frame: %+v, %v", m, err)
	}
	gws := []Gateway{{Addr: "1.2.3.4:5", Healthy: true}}
	withGW := publishBody(&message{T: msgPublish, Seq: 1, Cluster: "a", Gateways: &gws})
	badHealthy := append([]byte(nil), withGW...)
	badHealthy[len(badHealthy)-3] = 7 // gateways[0].healthy, before the empty put and del counts
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"truncated", "bytes left", good[:len(good)-1]},
		{"trailing", "after the publish", append(append([]byte(nil), good...), 0)},
		{"flags", "unknown bits", []byte{binPublish, 1, 0, 0x40, 0, 0, 0}},
		{"healthy", "not 0 or 1", badHealthy},
		{"no seq", "seq: required", publishBody(&message{T: msgPublish, Cluster: "a"})},
		{"bad export", "put[0]", publishBody(&message{T: msgPublish, Seq: 1, Put: []Export{{Namespace: "default", Name: "Bad_Name"}}})},
		{"twice", "twice", publishBody(&message{T: msgPublish, Seq: 1, Put: []Export{{Namespace: "d", Name: "x"}, {Namespace: "d", Name: "x"}}})},
		{"bad del", "del[0]", publishBody(&message{T: msgPublish, Seq: 1, Del: []string{"nokey"}})},
		{"base and cont", "exclusive", publishBody(&message{T: msgPublish, Seq: 1, Base: 3, Cont: true})},
		{"bad gateway", "gateways[0].addr", publishBody(&message{T: msgPublish, Seq: 1, Gateways: &[]Gateway{{Addr: "nohost"}}})},
		{"too many puts", "at most 10000", append(binary.AppendUvarint([]byte{binPublish, 1, 0, 0, 0}, MaxExportsPerFrame+1), make([]byte, 2*(MaxExportsPerFrame+1))...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readFrame(bufio.NewReader(bytes.NewReader(frameBytes(string(tc.body)))))
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != CodeMalformed || !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("got %v, want malformed containing %q", err, tc.want)
			}
		})
	}
}

// FuzzPublishFrame: the binary publish decoder never panics, and what it
// accepts encodes and decodes to the same message.
func FuzzPublishFrame(f *testing.F) {
	gws := []Gateway{{Addr: "1.2.3.4:5", Healthy: true}}
	f.Add(publishBody(&message{T: msgPublish, Seq: 3, Base: 2, Cluster: "a", Gateways: &gws,
		Put: []Export{{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80}}, Labels: map[string]string{"k": "v"}}}, Del: []string{"d/y"}}))
	f.Add(publishBody(&message{T: msgPublish, Seq: 1, Cont: true}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodePublishFrame(body)
		if err != nil {
			return
		}
		again, err := decodePublishFrame(publishBody(m))
		if err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("not stable:\n%+v\n%+v", m, again)
		}
	})
}
