package streambench

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestRateMeasuresAfterAStall: workers that first look at the clock after
// RateTime has passed (this process stalled as they started) still finish a
// connection each, so the rate is a measurement and never 0. TestBenchSmall
// asserts a positive rate; a stall of its 300 ms RateTime made it 0.
func TestRateMeasuresAfterAStall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	// A nanosecond has passed before any worker starts.
	b := &bench{cfg: Config{RateWorkers: 2, RateTime: time.Nanosecond}}
	rate, failed := b.rate(context.Background(), []string{ln.Addr().String()})
	if failed != 0 || rate <= 0 {
		t.Errorf("rate %v/s with %d failed, want a positive rate and no failure", rate, failed)
	}
}
