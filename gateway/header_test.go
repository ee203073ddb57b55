package gateway

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Namespace: "default", Export: "echo"},
		{Namespace: "prod", Export: "db", SourceNamespace: "web", SourceLabels: map[string]string{"app": "front", "tier": "1", "example.com/team": ""}},
		{Namespace: "default", Export: "echo", Port: 1},
		{Namespace: "default", Export: "echo", Port: 9090, SourceNamespace: "web", SourceLabels: map[string]string{"app": "front"}},
		{Namespace: "default", Export: "echo", Port: 65535},
		{Namespace: "default", Export: "dns", Port: 53, Datagram: true},
		{Namespace: "default", Export: "dns", Port: 53, Datagram: true, SourceNamespace: "web", SourceLabels: map[string]string{"app": "front"}},
	} {
		b := h.Marshal()
		got, err := ParseHeader(b)
		if err != nil {
			t.Fatalf("ParseHeader(Marshal(%+v)): %v", h, err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Errorf("round trip: got %+v, want %+v", got, h)
		}
		// Without a port the header is exactly what a version-1 gateway
		// sends and reads; with one, version 2; a UDP flow, version 3.
		want := byte(2)
		switch {
		case h.Datagram:
			want = 3
		case h.Port == 0:
			want = 1
		}
		if b[1] != want {
			t.Errorf("%+v encodes as version %d, want %d", h, b[1], want)
		}
	}
}

// TestHeaderVersion1: the bytes a version-1 gateway sends (written out
// here, not by Marshal) parse, with no port.
func TestHeaderVersion1(t *testing.T) {
	v1 := []byte{'S', 1, 7, 'd', 'e', 'f', 'a', 'u', 'l', 't', 4, 'e', 'c', 'h', 'o', 3, 'w', 'e', 'b', 1, 3, 'a', 'p', 'p', 1, 'x'}
	h, err := ParseHeader(v1)
	want := Header{Namespace: "default", Export: "echo", SourceNamespace: "web", SourceLabels: map[string]string{"app": "x"}}
	if err != nil || !reflect.DeepEqual(h, want) {
		t.Fatalf("ParseHeader(v1) = %+v, %v; want %+v", h, err, want)
	}
}

func TestParseHeaderRejects(t *testing.T) {
	good := Header{Namespace: "default", Export: "echo", SourceLabels: map[string]string{"a": "1", "b": "2"}}.Marshal()
	for name, b := range map[string][]byte{
		"empty":              nil,
		"magic":              append([]byte{'X'}, good[1:]...),
		"version":            append([]byte{'S', 9}, good[2:]...),
		"truncated":          good[:len(good)-1],
		"trailing":           append(append([]byte{}, good...), 0),
		"no export":          Header{Namespace: "default"}.Marshal(),
		"huge length":        {'S', 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unsorted":           {'S', 1, 1, 'n', 1, 'e', 0, 2, 1, 'b', 0, 1, 'a', 0},
		"repeated":           {'S', 1, 1, 'n', 1, 'e', 0, 2, 1, 'a', 0, 1, 'a', 0},
		"many labels":        {'S', 1, 1, 'n', 1, 'e', 0, 200},
		"long varint":        {'S', 1, 1, 'n', 1, 'e', 0x80, 0x00, 0},
		"version 0":          {'S', 0, 1, 'n', 1, 'e', 0, 0},
		"v2 port 0":          {'S', 2, 1, 'n', 1, 'e', 0, 0, 0},
		"v2 big port":        {'S', 2, 1, 'n', 1, 'e', 0, 0x80, 0x80, 0x04, 0},
		"v2 no port":         {'S', 2, 1, 'n', 1, 'e', 0},
		"v2 long port":       {'S', 2, 1, 'n', 1, 'e', 0, 0x81, 0x00, 0},
		"v2 cut in the port": Header{Namespace: "n", Export: "e", Port: 300}.Marshal()[:8],
		"v3 TCP":             {'S', 3, 1, 'n', 1, 'e', 0, 53, 6, 0},
		"v3 no protocol":     {'S', 3, 1, 'n', 1, 'e', 0, 53},
		"v3 port 0":          {'S', 3, 1, 'n', 1, 'e', 0, 0, 17, 0},
		"v3 long protocol":   {'S', 3, 1, 'n', 1, 'e', 0, 53, 0x91, 0x00, 0},
	} {
		if _, err := ParseHeader(b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: err = %v, want ErrBadHeader", name, err)
		}
	}
	// An unknown version is refused with a reason the sending gateway logs.
	if _, err := ParseHeader([]byte{'S', 4, 1, 'n', 1, 'e', 0, 0}); err == nil || !strings.Contains(err.Error(), "version 4, this gateway speaks 1 to 3") {
		t.Errorf("version 4: err = %v, want one naming the versions", err)
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
	// Version 2: a port, the largest, and ports that are none (0, past
	// 16 bits, over-long).
	f.Add(Header{Namespace: "n", Export: "e", Port: 8080, SourceNamespace: "s", SourceLabels: map[string]string{"k": "v"}}.Marshal())
	f.Add(Header{Namespace: "n", Export: "e", Port: 65535}.Marshal())
	f.Add([]byte{'S', 2, 1, 'n', 1, 'e', 0, 0, 0})
	f.Add([]byte{'S', 2, 1, 'n', 1, 'e', 0, 0x80, 0x80, 0x04, 0})
	f.Add([]byte{'S', 2, 1, 'n', 1, 'e', 0, 0x81, 0x00, 0})
	// Version 3: a UDP flow, and protocols that are not UDP.
	f.Add(Header{Namespace: "n", Export: "e", Port: 53, Datagram: true, SourceLabels: map[string]string{"k": "v"}}.Marshal())
	f.Add([]byte{'S', 3, 1, 'n', 1, 'e', 0, 53, 6, 0})
	f.Add([]byte{'S', 3, 1, 'n', 1, 'e', 0, 53, 0x91, 0x00, 0})
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
