package gateway

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/strait-net/strait/tunnel"
)

// TestDatagramQueueBounded: the queue takes records until the next one
// would pass its limit, refuses that one (the caller counts the drop), and
// hands everything queued to the writer in one batch that splits back into
// the same datagrams; after that it has room again.
func TestDatagramQueueBounded(t *testing.T) {
	const limit = 1000
	q := newDatagramQueue(limit)
	var want [][]byte
	for i := 0; ; i++ {
		p := bytes.Repeat([]byte{byte(i)}, 98) // 100 bytes a record
		if !q.push(p) {
			if i != 10 {
				t.Fatalf("queue of %d bytes refused record %d, want the 11th (10 fill it)", limit, i+1)
			}
			break
		}
		want = append(want, p)
	}
	select {
	case <-q.notify:
	default:
		t.Fatal("no notification for the first record")
	}
	batch := q.take()
	if len(batch) != limit {
		t.Fatalf("batch of %d bytes, want %d", len(batch), limit)
	}
	d := tunnel.NewDatagramReader(bytes.NewReader(batch))
	for i, w := range want {
		if got, err := d.Next(); err != nil || !bytes.Equal(got, w) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("after the records: %v, want io.EOF", err)
	}
	// Two buffers take turns: the batch written comes back as the queue
	// after the next take.
	q.recycle(batch)
	if !q.push([]byte("again")) {
		t.Fatal("an emptied queue refused a datagram")
	}
	q.recycle(q.take())
	q.push([]byte("and again"))
	if got := q.take(); cap(got) != cap(batch) {
		t.Errorf("the writer's buffer was not reused (cap %d, want %d)", cap(got), cap(batch))
	}
	// A record larger than what is left is refused, also an empty one when
	// the queue is exactly full.
	q = newDatagramQueue(minUDPQueueBytes)
	if !q.push(make([]byte, tunnel.MaxDatagram)) {
		t.Fatal("the largest datagram does not fit the smallest queue")
	}
	if q.push(nil) {
		t.Error("a full queue took an empty datagram")
	}
}

func TestUDPConfigDefaults(t *testing.T) {
	var c UDPConfig
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.idleTimeout() != DefaultUDPIdleTimeout || c.queueBytes() != DefaultUDPQueueBytes || c.maxFlows() != DefaultUDPMaxFlows || c.importRate() != DefaultUDPImportRate {
		t.Errorf("zero UDPConfig: %v %d %d %d, want the defaults", c.idleTimeout(), c.queueBytes(), c.maxFlows(), c.importRate())
	}
	if got := c.sweepInterval(); got != time.Second {
		t.Errorf("sweep interval %v, want 1s for the default timeout", got)
	}
}
