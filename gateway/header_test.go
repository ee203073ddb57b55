package gateway

import (
	"errors"
	"reflect"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Namespace: "default", Export: "echo"},
		{Namespace: "prod", Export: "db", SourceNamespace: "web", SourceLabels: map[string]string{"app": "front", "tier": "1", "example.com/team": ""}},
	} {
		got, err := ParseHeader(h.Marshal())
		if err != nil {
			t.Fatalf("ParseHeader(Marshal(%+v)): %v", h, err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Errorf("round trip: got %+v, want %+v", got, h)
		}
	}
}

func TestParseHeaderRejects(t *testing.T) {
	good := Header{Namespace: "default", Export: "echo", SourceLabels: map[string]string{"a": "1", "b": "2"}}.Marshal()
	for name, b := range map[string][]byte{
		"empty":       nil,
		"magic":       append([]byte{'X'}, good[1:]...),
		"version":     append([]byte{'S', 9}, good[2:]...),
		"truncated":   good[:len(good)-1],
		"trailing":    append(append([]byte{}, good...), 0),
		"no export":   Header{Namespace: "default"}.Marshal(),
		"huge length": {'S', 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unsorted":    {'S', 1, 1, 'n', 1, 'e', 0, 2, 1, 'b', 0, 1, 'a', 0},
		"repeated":    {'S', 1, 1, 'n', 1, 'e', 0, 2, 1, 'a', 0, 1, 'a', 0},
		"many labels": {'S', 1, 1, 'n', 1, 'e', 0, 200},
		"long varint": {'S', 1, 1, 'n', 1, 'e', 0x80, 0x00, 0},
	} {
		if _, err := ParseHeader(b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: err = %v, want ErrBadHeader", name, err)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(Header{Namespace: "default", Export: "echo"}.Marshal())
	f.Add(Header{Namespace: "n", Export: "e", SourceNamespace: "s", SourceLabels: map[string]string{"k": "v"}}.Marshal())
	// Edges: nothing, cut short, an over-long and a 10-byte varint, a
	// label count past the limit, names of invalid UTF-8.
	good := Header{Namespace: "n", Export: "e", SourceNamespace: "s", SourceLabels: map[string]string{"k": "v"}}.Marshal()
	f.Add([]byte{})
	f.Add(good[:len(good)-1])
	f.Add(append(good[:2:2], 0x81, 0x00, 'n', 1, 'e', 0, 0))
	f.Add(append(good[:2:2], 1, 'n', 1, 'e', 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	f.Add(append(good[:2:2], 1, 'n', 1, 'e', 0, 0xff, 0x7f))
	f.Add(Header{Namespace: "\xff\xfe", Export: "\xc3", SourceLabels: map[string]string{"\xff": "\xfe"}}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		// Whatever parses is canonical: it encodes back to the same bytes.
		if again := h.Marshal(); string(again) != string(b) {
			t.Fatalf("accepted non-canonical header %x (re-encodes to %x)", b, again)
		}
	})
}
