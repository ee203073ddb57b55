package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
)

func frameBytes(body string) []byte {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	return append(hdr[:], body...)
}

func TestReadFrameRejects(t *testing.T) {
	big := make([]byte, 4)
	binary.BigEndian.PutUint32(big, MaxFrame+1)
	for _, tc := range []struct {
		name, code, want string
		data             []byte
	}{
		{"oversized", CodeTooLarge, "exceeds", big},
		{"not json", CodeMalformed, "frame:", frameBytes(`{"t":`)},
		{"unknown field", CodeMalformed, "unknown field", frameBytes(`{"t":"hello","v":3,"y":1}`)},
		{"trailing", CodeMalformed, "after the JSON", frameBytes(`{"t":"hello","v":3} {}`)},
		{"no type", CodeMalformed, "t: required", frameBytes(`{}`)},
		{"unknown type", CodeMalformed, "is not one of", frameBytes(`{"t":"nope"}`)},
		{"version", CodeMalformed, "protocol version", frameBytes(`{"t":"hello","v":1}`)},
		{"old agent", CodeMalformed, "v: 2 is not the supported protocol version 3", frameBytes(`{"t":"hello","v":2}`)},
		{"no seq", CodeMalformed, "seq: required", frameBytes(`{"t":"publish","cluster":"a"}`)},
		{"bad export", CodeMalformed, "put[0]", frameBytes(`{"t":"publish","seq":1,"put":[{"namespace":"default","name":"Bad_Name"}]}`)},
		{"bad port", CodeMalformed, "port", frameBytes(`{"t":"publish","seq":1,"put":[{"namespace":"default","name":"x","ports":[{"port":0}]}]}`)},
		{"twice", CodeMalformed, "twice", frameBytes(`{"t":"publish","seq":1,"put":[{"namespace":"d","name":"x"},{"namespace":"d","name":"x"}]}`)},
		{"bad del", CodeMalformed, "del[0]", frameBytes(`{"t":"publish","seq":1,"del":["nokey"]}`)},
		{"bad gateway", CodeMalformed, "gateways[0].addr", frameBytes(`{"t":"publish","seq":1,"gateways":[{"addr":"nohost"}]}`)},
		{"base and cont", CodeMalformed, "exclusive", frameBytes(`{"t":"publish","seq":1,"base":3,"cont":true}`)},
		{"empty key", CodeMalformed, "entries[0].k", frameBytes(`{"t":"delta","entries":[{"k":"","r":1}]}`)},
		{"v and x", CodeMalformed, "exclusive", frameBytes(`{"t":"delta","entries":[{"k":"c/a/e/d/x","v":{},"x":{"namespace":"d","name":"x"},"r":1}]}`)},
		{"x under another key", CodeMalformed, "entries[0].x", frameBytes(`{"t":"delta","entries":[{"k":"c/a/e/d/y","x":{"namespace":"d","name":"x"},"r":1}]}`)},
		{"x not an export key", CodeMalformed, "entries[0].x", frameBytes(`{"t":"delta","entries":[{"k":"c/a/gw","x":{"namespace":"d","name":"x"},"r":1}]}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readFrame(bufio.NewReader(bytes.NewReader(tc.data)))
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != tc.code || !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("got %v, want %s containing %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestFrameRoundTrip(t *testing.T) {
	gws := []Gateway{{Addr: "10.0.0.1:4443", Healthy: true}}
	in := &message{T: msgPublish, Seq: 7, Cluster: "a", Base: 3, Gateways: &gws,
		Put: []Export{{Namespace: "default", Name: "echo", Labels: map[string]string{"app": "echo"}}}, Del: []string{"default/old"}}
	var buf bytes.Buffer
	if err := writeFrame(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := readFrame(bufio.NewReader(&buf))
	if err != nil {
		t.Fatal(err)
	}
	if out.Seq != 7 || out.Base != 3 || len(*out.Gateways) != 1 || out.Put[0].Labels["app"] != "echo" || out.Del[0] != "default/old" {
		t.Fatalf("round trip: %+v", out)
	}
}

// FuzzReadFrame: the decoder never panics, never accepts a frame over
// MaxFrame, and what it accepts encodes and decodes to the same encoding.
func FuzzReadFrame(f *testing.F) {
	for _, s := range []string{
		`{"t":"hello","v":3,"cluster":"a","since":4}`,
		`{"t":"publish","seq":1,"cluster":"a","base":2,"gateways":[{"addr":"1.2.3.4:5","healthy":true}],"put":[{"namespace":"d","name":"x","ports":[{"port":80}]}],"del":["d/y"]}`,
		`{"t":"delta","rev":9,"entries":[{"k":"c/a/e/d/x","x":{"namespace":"d","name":"x","ports":[{"port":80}]},"r":9},{"k":"c/a/e/d/y","r":9},{"k":"c/a/gw","v":[{"addr":"1.2.3.4:5"}],"r":9}]}`,
		`{"t":"error","code":"stale","msg":"m"}`,
	} {
		f.Add(frameBytes(s))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(frameBytes(string(appendEntriesFrame(nil, msgDelta, 9, false, []Entry{{Key: exportKey("a", "d/x"), Value: encodeExport(Export{Namespace: "d", Name: "x"}), ModRev: 9}}))))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readFrame(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		if len(data) > 4+MaxFrame {
			t.Fatalf("accepted a frame of %d bytes", len(data))
		}
		var b1, b2 bytes.Buffer
		if err := writeFrame(&b1, m); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := readFrame(bufio.NewReader(bytes.NewReader(b1.Bytes())))
		if err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		if err := writeFrame(&b2, m2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Fatalf("encoding not stable:\n%s\n%s", b1.Bytes(), b2.Bytes())
		}
	})
}

// TestEntriesFrame: what the broker encodes from stored entries decodes
// to typed exports and raw other values.
func TestEntriesFrame(t *testing.T) {
	ex := Export{Namespace: "d", Name: "x", Ports: []catalog.ServicePort{{Port: 80}}}
	entries := []Entry{
		{Key: exportKey("a", "d/x"), Value: encodeExport(ex), ModRev: 5},
		{Key: exportKey("a", "d/y"), ModRev: 5},
		{Key: gwKey("a"), Value: []byte(`[{"addr":"1.2.3.4:5","healthy":true}]`), ModRev: 5},
		{Key: exportKey("a", "d/z"), Value: mustJSON(Export{Namespace: "d", Name: "z"}), ModRev: 4}, // stored by protocol 2
	}
	var buf bytes.Buffer
	if err := encodeEntries(&buf, msgDelta, 5, entries); err != nil {
		t.Fatal(err)
	}
	m, err := readFrame(bufio.NewReader(&buf))
	if err != nil {
		t.Fatal(err)
	}
	e := m.Entries
	if m.T != msgDelta || m.Rev != 5 || len(e) != 4 || e[0].Export == nil || e[0].Export.Ports[0].Port != 80 || len(e[0].Value) != 0 ||
		e[1].Export != nil || len(e[1].Value) != 0 || e[2].Export != nil || len(e[2].Value) == 0 || e[3].ModRev != 4 {
		t.Fatalf("decoded %+v", e)
	}
	// An export stored as JSON by protocol 2 still reaches the mirror.
	mr := newMirror()
	for _, x := range e {
		mr.apply(x)
	}
	if _, ok := mr.clusters["a"].exports["d/z"]; !ok {
		t.Fatal("the JSON-stored export was dropped")
	}
}

// BenchmarkDecodeDelta decodes a delta frame of snapshotChunk exports and
// folds it into a client mirror, as an agent does.
func BenchmarkDecodeDelta(b *testing.B) {
	entries := make([]Entry, snapshotChunk)
	for i := range entries {
		ex := Export{Namespace: "default", Name: fmt.Sprintf("svc-%d", i), Ports: []catalog.ServicePort{{Name: "http", Port: 80}},
			Labels: map[string]string{"app": "svc"}}
		entries[i] = Entry{Key: exportKey("c1", ex.Key()), Value: encodeExport(ex), ModRev: 9}
	}
	var buf bytes.Buffer
	if err := encodeEntries(&buf, msgDelta, 9, entries); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := readFrame(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			b.Fatal(err)
		}
		mr := newMirror()
		for _, e := range m.Entries {
			mr.apply(e)
		}
	}
}
