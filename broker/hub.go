package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
)

// hub watches the store once per broker and keeps the encoded delta
// frames of recent revisions, so each revision is decoded and encoded
// once however many agents are connected; every connection only copies
// the bytes to its TLS stream. A connection that falls behind the window
// (or resumes from before it) reads the store itself, as without a hub.
type hub struct {
	mu      sync.Mutex
	frames  []hubFrame // in revision order
	size    int
	start   uint64        // frames cover revisions (start, last]
	last    uint64        // 0 until the hub watches
	changed chan struct{} // closed and replaced on every append
	limit   int
}

type hubFrame struct {
	rev  uint64
	data []byte // one or more complete frames (header included)
}

func newHub(limit int) *hub { return &hub{changed: make(chan struct{}), limit: limit} }

// run follows the store from its current revision until ctx is done.
func (h *hub) run(ctx context.Context, st Store) error {
	for ctx.Err() == nil {
		rev, err := st.Revision(ctx)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.frames, h.size, h.start, h.last = nil, 0, rev, rev
		h.mu.Unlock()
		err = st.Watch(ctx, rev, func(rev uint64, evs []Entry) error {
			var buf bytes.Buffer
			if err := encodeEntries(&buf, msgDelta, rev, evs); err != nil {
				return err
			}
			h.append(rev, buf.Bytes())
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && err != ErrCompacted {
			return err
		}
	}
	return nil
}

func (h *hub) append(rev uint64, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frames = append(h.frames, hubFrame{rev, data})
	h.size += len(data)
	h.last = rev
	for h.size > h.limit && len(h.frames) > 1 {
		h.size -= len(h.frames[0].data)
		h.start = h.frames[0].rev
		h.frames[0] = hubFrame{}
		h.frames = h.frames[1:]
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// after returns the frames of revisions after since and a channel that is
// closed when more arrive; ok is false if since is outside the window.
func (h *hub) after(since uint64) (out []hubFrame, changed chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == 0 || since < h.start || since > h.last {
		return nil, nil, false
	}
	i := len(h.frames)
	for i > 0 && h.frames[i-1].rev > since {
		i--
	}
	return append([]hubFrame(nil), h.frames[i:]...), h.changed, true
}

// follow streams from the hub while since stays in its window; it
// returns the revision it got to, with ok false once it must read the
// store instead.
func (h *hub) follow(ctx context.Context, w *frameWriter, since uint64) (uint64, bool, error) {
	for {
		frames, changed, ok := h.after(since)
		if !ok {
			return since, false, nil
		}
		for _, f := range frames {
			if err := w.sendRaw(f.data); err != nil {
				return since, true, err
			}
			since = f.rev
		}
		select {
		case <-ctx.Done():
			return since, true, ctx.Err()
		case <-changed:
		}
	}
}

// encodeEntries writes entries as binary frames of type t (snapshot or
// delta) of at most snapshotChunk entries and MaxFrame bytes; all but the
// last have More set.
func encodeEntries(buf *bytes.Buffer, t string, rev uint64, entries []Entry) error {
	var body []byte
	for first := true; first || len(entries) > 0; first = false {
		n, size := 0, 0
		for n < len(entries) && n < snapshotChunk {
			es := entrySize(entries[n])
			if size+es > MaxFrame-32 {
				break
			}
			size += es
			n++
		}
		if n == 0 && len(entries) > 0 {
			return protoErr(CodeTooLarge, "%s entry %s of %d bytes exceeds a frame", t, entries[0].Key, len(entries[0].Value))
		}
		body = appendEntriesFrame(body[:0], t, rev, n < len(entries), entries[:n])
		entries = entries[n:]
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
		buf.Write(hdr[:])
		buf.Write(body)
	}
	return nil
}
