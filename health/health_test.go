package health

import (
	"bytes"
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

func TestDecodeRejects(t *testing.T) {
	good := make([]byte, ProbeLen)
	Encode(good, 42)
	if seq, err := Decode(good); err != nil || seq != 42 {
		t.Fatalf("Decode(Encode(42)) = %d, %v", seq, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:11], "health probe: length 11, want 12"},
		{"magic", append([]byte("XH"), good[2:]...), `health probe: bad magic, want "SH"`},
		{"version", append([]byte("SH\x02"), good[3:]...), "health probe: version 2, want 1"},
		{"reserved", append([]byte("SH\x01\x07"), good[4:]...), "health probe: reserved byte 7, want 0"},
	} {
		if _, err := Decode(tc.b); err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good := make([]byte, ProbeLen)
	Encode(good, 7)
	f.Add(good)
	f.Add([]byte("SH"))
	// Edges: nothing, one byte short, one over, the largest sequence
	// number, an unknown version.
	f.Add([]byte{})
	f.Add(good[:ProbeLen-1])
	f.Add(append(bytes.Clone(good), 0))
	top := make([]byte, ProbeLen)
	Encode(top, math.MaxUint64)
	f.Add(top)
	v := bytes.Clone(good)
	v[2] = 0xff
	f.Add(v)
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, err := Decode(b)
		if err != nil {
			return
		}
		again := make([]byte, ProbeLen)
		Encode(again, seq)
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, which does not re-encode to itself (%x)", b, again)
		}
	})
}

// TestProberSeesDeathAndReturn runs a real responder on loopback, closes it
// (its port then answers with ICMP port unreachable, as a killed gateway's
// does) and opens it again on the same port.
func TestProberSeesDeathAndReturn(t *testing.T) {
	r, err := NewResponder(ResponderConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := r.Addr().String()
	go r.Run(context.Background())

	var mu sync.Mutex
	var events []bool
	changed := make(chan struct{}, 16)
	// The death here is a refusal, seen at once; silence would also end a
	// target after Misses intervals, and a busy host can keep the
	// responder's goroutine from answering for longer than a few 2 ms
	// intervals (the first reply came late in 1 of 40 runs at load 12,
	// adding a "down" before the first "up"). 1000 misses (2 s) leave the
	// silence rule on without letting a stall pass for a death.
	p, err := NewProber(ProberConfig{Targets: []string{addr}, Interval: 2 * time.Millisecond, Misses: 1000, OnChange: func(_ string, up bool) {
		mu.Lock()
		events = append(events, up)
		mu.Unlock()
		changed <- struct{}{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(want bool) {
		t.Helper()
		for {
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no change to up=%v; events %v", want, events)
			}
			mu.Lock()
			last := events[len(events)-1]
			mu.Unlock()
			if last == want {
				return
			}
		}
	}
	wait(true)
	r.Close()
	wait(false)
	r2, err := NewResponder(ResponderConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	go r2.Run(context.Background())
	wait(true)
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 3 {
		t.Errorf("events %v, want up, down, up", events)
	}
	if p.Received.Load() == 0 || p.Sent.Load() < p.Received.Load() {
		t.Errorf("sent %d received %d", p.Sent.Load(), p.Received.Load())
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := NewProber(ProberConfig{Targets: []string{"x"}, OnChange: func(string, bool) {}}); err == nil || err.Error() != `health prober: targets[0] "x": want host:port` {
		t.Errorf("bad target: %v", err)
	}
	if _, err := NewResponder(ResponderConfig{Addr: "nope"}); err == nil || err.Error() != `health responder: addr "nope": want host:port` {
		t.Errorf("bad addr: %v", err)
	}
}
