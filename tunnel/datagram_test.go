package tunnel

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestDatagramRecords: records of every size class, empty and the largest,
// come back whole and in order, however the reader splits the stream.
func TestDatagramRecords(t *testing.T) {
	sizes := []int{0, 1, 2, 100, 1472, 65507, MaxDatagram, 3}
	var wire []byte
	var want [][]byte
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		var err error
		if wire, err = AppendDatagram(wire, p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	if _, err := AppendDatagram(nil, make([]byte, MaxDatagram+1)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Errorf("AppendDatagram of %d bytes: %v, want ErrDatagramTooLarge", MaxDatagram+1, err)
	}
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(wire),
		"one byte": iotest.OneByteReader(bytes.NewReader(wire)),
		"half":     iotest.HalfReader(bytes.NewReader(wire)),
		"data+EOF": iotest.DataErrReader(bytes.NewReader(wire)),
	} {
		t.Run(name, func(t *testing.T) {
			d := NewDatagramReader(r)
			for i, w := range want {
				got, err := d.Next()
				if err != nil || !bytes.Equal(got, w) {
					t.Fatalf("record %d: %d bytes, %v; want %d bytes", i, len(got), err, len(w))
				}
			}
			if _, err := d.Next(); err != io.EOF {
				t.Fatalf("after the last record: %v, want io.EOF", err)
			}
		})
	}
}

// TestDatagramCut: a stream that ends inside a record, in its length or in
// its bytes, is io.ErrUnexpectedEOF, never a short datagram.
func TestDatagramCut(t *testing.T) {
	wire, _ := AppendDatagram(nil, []byte("hello"))
	for cut := 1; cut < len(wire); cut++ {
		d := NewDatagramReader(bytes.NewReader(wire[:cut]))
		if p, err := d.Next(); err != io.ErrUnexpectedEOF {
			t.Errorf("cut after %d bytes: %q, %v; want io.ErrUnexpectedEOF", cut, p, err)
		}
	}
	boom := errors.New("boom")
	d := NewDatagramReader(io.MultiReader(bytes.NewReader(wire[:3]), iotest.ErrReader(boom)))
	if _, err := d.Next(); err != boom {
		t.Errorf("reader error inside a record: %v, want it passed on", err)
	}
}

func TestDatagramBuffered(t *testing.T) {
	wire, _ := AppendDatagram(nil, []byte("ab"))
	wire, _ = AppendDatagram(wire, []byte("cde"))
	d := NewDatagramReader(bytes.NewReader(wire[:len(wire)-1]))
	if d.Buffered() {
		t.Fatal("Buffered before any read")
	}
	if p, err := d.Next(); err != nil || string(p) != "ab" {
		t.Fatalf("Next = %q, %v", p, err)
	}
	if d.Buffered() {
		t.Error("Buffered with only part of the second record read")
	}
}

// FuzzDatagramReader: any input splits into records that re-encode to the
// input's prefix; the end is io.EOF exactly when nothing is left over.
func FuzzDatagramReader(f *testing.F) {
	rec := func(ps ...string) []byte {
		var b []byte
		for _, p := range ps {
			b, _ = AppendDatagram(b, []byte(p))
		}
		return b
	}
	f.Add([]byte{})
	f.Add(rec("hello"))
	f.Add(rec("", "", "x"))
	f.Add(rec("abc")[:3])
	f.Add([]byte{0x00})
	f.Add([]byte{0xff, 0xff})
	f.Add(append([]byte{0xff, 0xff}, make([]byte, MaxDatagram)...))
	f.Add(append(rec("\xff\xfe\xc3"), 0x00, 0x05, 'a'))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDatagramReader(iotest.HalfReader(bytes.NewReader(b)))
		var again []byte
		for {
			p, err := d.Next()
			if err == io.EOF {
				if !bytes.Equal(again, b) {
					t.Fatalf("io.EOF after %d of %d bytes", len(again), len(b))
				}
				return
			}
			if err == io.ErrUnexpectedEOF {
				if len(again) >= len(b) || !bytes.Equal(again, b[:len(again)]) {
					t.Fatalf("cut record after %d of %d bytes", len(again), len(b))
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if again, err = AppendDatagram(again, p); err != nil {
				t.Fatal(err)
			}
			if len(again) > len(b) || !bytes.Equal(again, b[:len(again)]) {
				t.Fatalf("records do not re-encode to the input")
			}
		}
	})
}
