package broker

import (
	"context"
	"errors"
)

// Store keeps the catalog as keyed entries under one global revision. The
// broker is stateless: everything it knows is in the Store, so several
// brokers over one shared Store (etcd) serve the same catalog.
//
// Contract (store_contract_test.go checks it on every implementation):
//   - Revisions start at 1 and increase by one per committed change set;
//     every entry records the revision of its last write (ModRev).
//   - Commit applies puts and deletes atomically if cond holds: the ModRev
//     of cond.Key equals cond.ModRev (0: the key is absent). Otherwise it
//     changes nothing and returns ErrConflict. Deleting an absent key is a
//     no-op; a Commit that changes nothing still commits (a new revision),
//     since the condition key's put is the write. An implementation may
//     split a large Commit into several revisions, each conditioned on the
//     previous one, and returns the last; watchers may then see a prefix.
//   - Snapshot returns every entry and the revision they are at; Revision
//     only the revision.
//   - Get returns one entry, ok false if absent.
//   - An empty Cond.Key makes a Commit unconditional.
//   - Watch calls fn with the events after revision after, in revision
//     order, all events of one revision in one call, until ctx is done or
//     fn returns an error (returned as is). If the history after `after`
//     is no longer kept, Watch returns ErrCompacted at once; a watcher then
//     takes a Snapshot and watches from its revision.
//   - Ephemeral puts key with value for as long as the returned stop
//     function is not called and the process lives (a lease): entries of
//     brokers that died disappear without anyone deleting them.
//   - Close releases the store; it is idempotent.
type Store interface {
	Commit(ctx context.Context, cond Cond, puts []Entry, dels []string) (rev uint64, err error)
	Snapshot(ctx context.Context) (entries []Entry, rev uint64, err error)
	Revision(ctx context.Context) (uint64, error)
	Get(ctx context.Context, key string) (e Entry, ok bool, err error)
	Watch(ctx context.Context, after uint64, fn func(rev uint64, events []Entry) error) error
	Ephemeral(ctx context.Context, key string, value []byte) (stop func(), err error)
	Close() error
}

// Entry is one key of the catalog. In events a nil Value is a deletion.
type Entry struct {
	Key    string `json:"k"`
	Value  []byte `json:"v,omitempty"`
	ModRev uint64 `json:"r"`
}

// Cond is the compare of a Commit.
type Cond struct {
	Key    string
	ModRev uint64
}

// Errors of the Store contract.
var (
	ErrConflict  = errors.New("condition failed: the entry changed since the given revision")
	ErrCompacted = errors.New("revision compacted: history no longer kept, take a snapshot")
)
