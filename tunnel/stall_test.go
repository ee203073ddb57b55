package tunnel_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// TestStalledReadersDoNotBlockTheSession: streams whose readers never read
// fill their windows (256 KiB each) and stay full, and so do streams whose
// readers kept up until their windows grew and then stopped; an echo
// stream on the same session keeps answering about as fast as one on a session without
// them. The stalled streams together hold more than the session window, so
// counting their unread data against it (as before sessionCredit) blocks
// the echo for good. The reference is a second session of the same
// transport, measured in turns with the first, so load slows both alike.
func TestStalledReadersDoNotBlockTheSession(t *testing.T) {
	const (
		sessionWindow = 4 << 20
		stalled       = 24 // × 256 KiB = 6 MiB unread, beyond the 4 MiB session window
		grown         = 8  // read 4 MiB each first: windows up to 1 MiB, 8 MiB in all
		streamWindow  = 256 << 10
	)
	tr := newTLS(t, nil, func(c *tunnel.Config) {
		c.MaxStreamWindow = 1 << 20
		c.MaxSessionWindow = sessionWindow
	})
	client, server := tunneltest.Pair(t, tr)
	refClient, refServer := tunneltest.Pair(t, tr)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, s := range []tunnel.Session{client, server, refClient, refServer} {
			s.Close()
		}
		wg.Wait()
	}()
	var written atomic.Int64
	serve := func(s tunnel.Session) {
		defer wg.Done()
		for {
			st, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				if string(st.Header()) != "stall" {
					_, _ = io.Copy(st, st)
					return
				}
				// Write until the window is full and the session ends.
				chunk := make([]byte, 64<<10)
				for {
					n, err := st.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}
	wg.Add(2)
	go serve(server)
	go serve(refServer)

	var read int64
	for range grown {
		st, err := client.OpenStream(ctx, []byte("stall"))
		if err != nil {
			t.Fatal(err)
		}
		st.SetReadDeadline(time.Now().Add(patience)) // a hang bound only
		n, err := io.CopyN(io.Discard, st, 4<<20)
		read += n
		if err != nil {
			t.Fatalf("reading a stream beside stalled ones with grown windows: %v", err)
		}
	}
	if w := client.Stats().StreamWindow; w <= streamWindow {
		t.Fatalf("no stream window grew (largest %d KiB): the grown case tests nothing", w>>10)
	}
	for range stalled {
		if _, err := client.OpenStream(ctx, []byte("stall")); err != nil {
			t.Fatal(err)
		}
	}
	// Every stalled stream fills its whole window; the session window,
	// full after 16 of them (or a few grown ones) when unread data
	// counted, holds none back.
	waitFor(t, func() bool { return written.Load()-read >= (stalled+grown)*streamWindow })

	echo, err := client.OpenStream(ctx, []byte("echo"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := refClient.OpenStream(ctx, []byte("echo"))
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1024)
	back := make([]byte, len(msg))
	roundTrips := func(st tunnel.Stream, n int) time.Duration {
		t.Helper()
		start := time.Now()
		for range n {
			// A hang bound only: without the fix the reply never comes.
			st.SetReadDeadline(time.Now().Add(patience))
			if _, err := st.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(st, back); err != nil {
				t.Fatalf("echo beside %d stalled streams: %v", stalled, err)
			}
		}
		return time.Since(start)
	}
	var took, refTook time.Duration
	for range 10 {
		refTook += roundTrips(ref, 50)
		took += roundTrips(echo, 50)
	}
	t.Logf("500 echoes beside %d stalled streams took %v, on a session without them %v", stalled, took, refTook)
	if took > 10*refTook {
		t.Errorf("echoes beside %d stalled streams took %v, %.1f× those on a session without them (%v)",
			stalled, took, float64(took)/float64(refTook), refTook)
	}
	// The stalled streams hold their windows and no more: 256 KiB each,
	// and the growth of all windows is bounded by the session's budget.
	if unread, most := written.Load()-read, int64((stalled+grown)*streamWindow+sessionWindow); unread > most {
		t.Errorf("stalled streams hold %d KiB unread, beyond 256 KiB each plus the growth budget (%d KiB)", unread>>10, most>>10)
	}
}
