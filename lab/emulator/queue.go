package emulator

// entry is a packet held by the link until its release time.
type entry struct {
	buf     []byte // the whole pooled buffer; the packet is buf[Headroom:Headroom+n]
	n       int
	release int64
	ahead   int64  // how much earlier than release the writer may take it (see releaseAhead)
	arrival int64  // when the kernel queued it on the source device (for traces)
	seq     uint64 // arrival order, to keep equal release times in order
}

// queue holds the packets of one direction ordered by release time: a ring
// when the FIFO clamp already makes release times non-decreasing, a binary
// heap when packets may be reordered. Not safe for concurrent use.
type queue struct {
	heap       bool
	items      []entry
	head, size int // ring mode
	seq        uint64
}

func (q *queue) len() int { return q.size }

func (q *queue) push(e entry) {
	e.seq = q.seq
	q.seq++
	if q.heap {
		q.items = append(q.items, e)
		q.size++
		q.up(q.size - 1)
		return
	}
	if q.size == len(q.items) {
		grown := make([]entry, max(64, 2*len(q.items)))
		for i := range q.size {
			grown[i] = q.items[(q.head+i)%len(q.items)]
		}
		q.items, q.head = grown, 0
	}
	q.items[(q.head+q.size)%len(q.items)] = e
	q.size++
}

// peek returns the packet due first; the queue must not be empty.
func (q *queue) peek() *entry {
	if q.heap {
		return &q.items[0]
	}
	return &q.items[q.head]
}

func (q *queue) pop() entry {
	if q.heap {
		e := q.items[0]
		last := q.size - 1
		q.items[0] = q.items[last]
		q.items[last] = entry{}
		q.items = q.items[:last]
		q.size--
		if q.size > 0 {
			q.down(0)
		}
		return e
	}
	e := q.items[q.head]
	q.items[q.head] = entry{}
	q.head = (q.head + 1) % len(q.items)
	q.size--
	return e
}

func (q *queue) less(i, j int) bool {
	a, b := &q.items[i], &q.items[j]
	return a.release < b.release || (a.release == b.release && a.seq < b.seq)
}

func (q *queue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.items[i], q.items[p] = q.items[p], q.items[i]
		i = p
	}
}

func (q *queue) down(i int) {
	for {
		l := 2*i + 1
		if l >= q.size {
			return
		}
		m := l
		if r := l + 1; r < q.size && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.items[i], q.items[m] = q.items[m], q.items[i]
		i = m
	}
}
