package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultHistory is how many revisions the embedded store keeps for
// resuming watchers; older ones are compacted.
const DefaultHistory = 100000

var (
	bucketKV        = []byte("kv")        // key → 8-byte ModRev ‖ value
	bucketLog       = []byte("log")       // 8-byte rev → JSON []Entry (nil Value: deleted)
	bucketMeta      = []byte("meta")      // "rev", "compacted" → 8 bytes
	bucketEphemeral = []byte("ephemeral") // keys put by Ephemeral, deleted on the next Open
	keyRev          = []byte("rev")
	keyCompacted    = []byte("compacted")
)

// BoltStore is the embedded Store: one bbolt file, one broker. Every
// Commit is one fsynced transaction; history for resuming watchers is a
// log bucket of the last History revisions.
type BoltStore struct {
	db      *bolt.DB
	history uint64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every commit
	closed  bool
}

// OpenBolt opens (or creates) the store file at path. keep is how many
// revisions of history to keep (0: DefaultHistory). Entries left by
// Ephemeral in a previous run are deleted: that process is gone.
func OpenBolt(path string, keep int) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &BoltStore{db: db, history: uint64(keep), changed: make(chan struct{})}
	if keep <= 0 {
		s.history = DefaultHistory
	}
	var stale []string
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKV, bucketLog, bucketMeta, bucketEphemeral} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketEphemeral).ForEach(func(k, _ []byte) error {
			stale = append(stale, string(k))
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if len(stale) > 0 {
		if _, err := s.commit(Cond{}, nil, stale, nil); err != nil {
			db.Close()
			return nil, fmt.Errorf("open store %s: remove stale entries: %w", path, err)
		}
	}
	return s, nil
}

func u64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func be(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// Commit implements Store.
func (s *BoltStore) Commit(ctx context.Context, cond Cond, puts []Entry, dels []string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.commit(cond, puts, dels, nil)
}

// commit applies the change in one transaction; ephemeral, if not nil, is
// called inside it to record or forget ephemeral keys.
func (s *BoltStore) commit(cond Cond, puts []Entry, dels []string, ephemeral func(*bolt.Tx) error) (uint64, error) {
	var rev uint64
	// Batch coalesces concurrent commits (several agents publishing at
	// once) into one transaction and one fsync; each function still runs
	// its condition check and gets its own revision. A function that fails
	// is rerun alone, so a conflict never fails the others.
	update := s.db.Batch
	if ephemeral != nil {
		update = s.db.Update
	}
	err := update(func(tx *bolt.Tx) error {
		rev = 0
		kv, meta := tx.Bucket(bucketKV), tx.Bucket(bucketMeta)
		if cond.Key != "" {
			if u64(kvRev(kv.Get([]byte(cond.Key)))) != cond.ModRev {
				return ErrConflict
			}
		}
		next := u64(meta.Get(keyRev)) + 1
		rev = next
		events := make([]Entry, 0, len(puts)+len(dels))
		for _, k := range dels {
			if kv.Get([]byte(k)) == nil {
				continue
			}
			if err := kv.Delete([]byte(k)); err != nil {
				return err
			}
			events = append(events, Entry{Key: k, ModRev: rev})
		}
		for _, e := range puts {
			v := make([]byte, 8+len(e.Value))
			binary.BigEndian.PutUint64(v, rev)
			copy(v[8:], e.Value)
			if err := kv.Put([]byte(e.Key), v); err != nil {
				return err
			}
			events = append(events, Entry{Key: e.Key, Value: e.Value, ModRev: rev})
		}
		data, err := json.Marshal(events)
		if err != nil {
			return err
		}
		log := tx.Bucket(bucketLog)
		if err := log.Put(be(rev), data); err != nil {
			return err
		}
		if rev > s.history {
			// Drop what fell out of the window; usually one revision.
			c := log.Cursor()
			for k, _ := c.First(); k != nil && u64(k) <= rev-s.history; k, _ = c.First() {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			if err := meta.Put(keyCompacted, be(rev-s.history)); err != nil {
				return err
			}
		}
		if ephemeral != nil {
			if err := ephemeral(tx); err != nil {
				return err
			}
		}
		return meta.Put(keyRev, be(rev))
	})
	if err != nil {
		if err == ErrConflict {
			return 0, err
		}
		return 0, fmt.Errorf("commit: %w", err)
	}
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return rev, nil
}

func kvRev(v []byte) []byte {
	if len(v) < 8 {
		return nil
	}
	return v[:8]
}

// Snapshot implements Store.
func (s *BoltStore) Snapshot(ctx context.Context) ([]Entry, uint64, error) {
	var out []Entry
	var rev uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = u64(tx.Bucket(bucketMeta).Get(keyRev))
		return tx.Bucket(bucketKV).ForEach(func(k, v []byte) error {
			out = append(out, Entry{Key: string(k), Value: bytes.Clone(v[8:]), ModRev: u64(v[:8])})
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	return out, rev, nil
}

// Revision implements Store.
func (s *BoltStore) Revision(ctx context.Context) (uint64, error) {
	var rev uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = u64(tx.Bucket(bucketMeta).Get(keyRev))
		return nil
	})
	return rev, err
}

// Get implements Store.
func (s *BoltStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	var e Entry
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketKV).Get([]byte(key)); len(v) >= 8 {
			e, ok = Entry{Key: key, Value: bytes.Clone(v[8:]), ModRev: u64(v[:8])}, true
		}
		return nil
	})
	return e, ok, err
}

// Watch implements Store.
func (s *BoltStore) Watch(ctx context.Context, after uint64, fn func(uint64, []Entry) error) error {
	for {
		s.mu.Lock()
		wait := s.changed
		s.mu.Unlock()
		type batch struct {
			rev    uint64
			events []Entry
		}
		var batches []batch
		err := s.db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if after < u64(meta.Get(keyCompacted)) {
				return ErrCompacted
			}
			if after > u64(meta.Get(keyRev)) {
				return fmt.Errorf("watch from revision %d: the store is at %d", after, u64(meta.Get(keyRev)))
			}
			c := tx.Bucket(bucketLog).Cursor()
			for k, v := c.Seek(be(after + 1)); k != nil; k, v = c.Next() {
				var evs []Entry
				if err := json.Unmarshal(v, &evs); err != nil {
					return fmt.Errorf("log revision %d: %w", u64(k), err)
				}
				batches = append(batches, batch{u64(k), evs})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, b := range batches {
			if err := fn(b.rev, b.events); err != nil {
				return err
			}
			after = b.rev
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
	}
}

// Ephemeral implements Store: the key is deleted by stop, by Close, or at
// the next Open after a crash.
func (s *BoltStore) Ephemeral(ctx context.Context, key string, value []byte) (func(), error) {
	_, err := s.commit(Cond{}, []Entry{{Key: key, Value: value}}, nil, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEphemeral).Put([]byte(key), nil)
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_, _ = s.commit(Cond{}, nil, []string{key}, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketEphemeral).Delete([]byte(key))
			})
		})
	}, nil
}

// Close implements Store.
func (s *BoltStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.db.Close()
}
