package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"sync"

	"github.com/strait-net/strait/internal/atomicfile"
)

// Set is an in-memory collection of valid resources, one per Key, with a
// revision that increases by one on every change. It copies resources in
// and out, so callers may keep and modify what they pass or get. The zero
// value is an empty set at revision 0; a Set is safe for concurrent use.
type Set struct {
	mu    sync.RWMutex
	rev   uint64
	items map[Key]entry
	// tombs remembers deletions (key → revision) so Changes can report
	// them; floor is the revision up to which deletions may be forgotten
	// (pruned, or made before the set was loaded).
	tombs map[Key]uint64
	floor uint64
	// wake is closed and replaced on every change (Wait).
	wake chan struct{}
}

type entry struct {
	res  Resource
	json []byte // canonical encoding: change detection without reflection
	rev  uint64 // revision of the last change to this resource
}

// maxTombs bounds the remembered deletions beyond the set's size; past it
// they are forgotten and a watcher from before gets a reset.
const maxTombs = 4096

// Revision returns the revision: the number of changes since the set was
// empty (or the revision it was loaded with, plus changes since).
func (s *Set) Revision() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// Apply validates r and stores a copy, creating or replacing the resource
// with its key. It reports whether the set changed; applying an equal
// resource again changes nothing and keeps the revision.
func (s *Set) Apply(r Resource) (changed bool, err error) {
	e, err := prepare(r)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(e), nil
}

func prepare(r Resource) (entry, error) {
	c := Clone(r)
	normalize(c)
	if err := c.Validate(); err != nil {
		return entry{}, fmt.Errorf("%s: %w", c.Key(), err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return entry{}, fmt.Errorf("%s: %w", c.Key(), err)
	}
	return entry{res: c, json: data}, nil
}

func (s *Set) applyLocked(e entry) bool {
	k := e.res.Key()
	if old, ok := s.items[k]; ok && bytes.Equal(old.json, e.json) {
		return false
	}
	if s.items == nil {
		s.items = map[Key]entry{}
	}
	s.rev++
	e.rev = s.rev
	s.items[k] = e
	delete(s.tombs, k)
	s.notifyLocked()
	return true
}

// Delete removes the resource with key k and reports whether it was there.
func (s *Set) Delete(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(k)
}

func (s *Set) deleteLocked(k Key) bool {
	if _, ok := s.items[k]; !ok {
		return false
	}
	delete(s.items, k)
	s.rev++
	if s.tombs == nil {
		s.tombs = map[Key]uint64{}
	}
	s.tombs[k] = s.rev
	if len(s.tombs) > maxTombs+len(s.items) {
		s.tombs, s.floor = nil, s.rev
	}
	s.notifyLocked()
	return true
}

func (s *Set) notifyLocked() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// Wait returns a channel that is closed once the set's revision is past
// rev (at once if it already is).
func (s *Set) Wait(rev uint64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev > rev {
		c := make(chan struct{})
		close(c)
		return c
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// Changes returns what changed after revision since, as of revision rev:
// copies of the resources of the given kinds (all if none) created or
// replaced since then, ordered as List orders them, and the keys of those
// deleted. If the set cannot tell (since is older than the deletions it
// remembers, or newer than its revision: a watcher of another set),
// reset is true and changed holds every resource of those kinds: the
// caller drops whatever it holds that is not in it.
func (s *Set) Changes(since uint64, kinds ...Kind) (changed []Resource, deleted []Key, rev uint64, reset bool) {
	keep, deleted, rev, reset := s.changes(since, kinds)
	sort.Slice(keep, func(i, j int) bool { return keep[i].res.Key().less(keep[j].res.Key()) })
	sort.Slice(deleted, func(i, j int) bool { return deleted[i].less(deleted[j]) })
	changed = make([]Resource, len(keep))
	for i, e := range keep {
		changed[i] = e.clone()
	}
	return changed, deleted, rev, reset
}

// ChangesShared is Changes without the copies and the order: the stored
// resources themselves, which the caller must not modify. It is for a
// reader that only looks (the gateway realizing thousands of imports per
// apply, where the copies were half of its reconcile).
func (s *Set) ChangesShared(since uint64, kinds ...Kind) (changed []Resource, deleted []Key, rev uint64, reset bool) {
	keep, deleted, rev, reset := s.changes(since, kinds)
	changed = make([]Resource, len(keep))
	for i, e := range keep {
		changed[i] = e.res
	}
	return changed, deleted, rev, reset
}

func (s *Set) changes(since uint64, kinds []Kind) (keep []entry, deleted []Key, rev uint64, reset bool) {
	s.mu.RLock()
	rev = s.rev
	reset = since < s.floor || since > s.rev
	for k, e := range s.items {
		if (reset || e.rev > since) && (len(kinds) == 0 || contains(kinds, k.Kind)) {
			keep = append(keep, e)
		}
	}
	if !reset {
		for k, r := range s.tombs {
			if r > since && (len(kinds) == 0 || contains(kinds, k.Kind)) {
				deleted = append(deleted, k)
			}
		}
	}
	s.mu.RUnlock()
	return keep, deleted, rev, reset
}

// clone deep-copies the entry's resource. Stored resources went through
// a JSON round trip (Clone) when they were prepared, so a plain copy
// equals what decoding their canonical encoding would give, at a fraction
// of the cost: the gateway lists every resource on every change.
func (e entry) clone() Resource {
	return deepCopy(reflect.ValueOf(e.res)).Interface().(Resource)
}

// deepCopy copies plain data: pointers, structs, slices, maps and values
// without references (the catalog's types hold nothing else).
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(deepCopy(v.Elem()))
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		c.Set(v) // then replace what holds references
		for i := 0; i < v.NumField(); i++ {
			if !c.Field(i).CanSet() {
				continue // unexported: shared, like json would drop it
			}
			switch v.Field(i).Kind() {
			case reflect.Pointer, reflect.Struct, reflect.Slice, reflect.Map, reflect.Interface:
				c.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			c.Index(i).Set(deepCopy(v.Index(i)))
		}
		return c
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			c.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return c
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(deepCopy(v.Elem()))
		return c
	default:
		return v
	}
}

// Get returns a copy of the resource with key k.
func (s *Set) Get(k Key) (Resource, bool) {
	s.mu.RLock()
	e, ok := s.items[k]
	s.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return e.clone(), true
}

// List returns copies of the resources of the given kinds (all kinds if
// none are given), ordered by kind (in Kinds order), namespace and name.
func (s *Set) List(kinds ...Kind) []Resource {
	s.mu.RLock()
	var keep []entry
	for k, e := range s.items {
		if len(kinds) == 0 || contains(kinds, k.Kind) {
			keep = append(keep, e)
		}
	}
	s.mu.RUnlock()
	sort.Slice(keep, func(i, j int) bool { return keep[i].res.Key().less(keep[j].res.Key()) })
	out := make([]Resource, len(keep))
	for i, e := range keep {
		out[i] = e.clone()
	}
	return out
}

// Len returns the number of resources.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

func contains[T comparable](list []T, x T) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

// snapshot is the persisted form of a Set.
type snapshot struct {
	Revision  uint64            `json:"revision"`
	Resources []json.RawMessage `json:"resources"`
}

// Store is a Set persisted to a JSON snapshot file and a journal beside
// it (<path>.journal), so a restarted gateway comes back with the
// resources and the revision it had. A change returns only once it is
// durable: it is appended to the journal as one line (the resources put
// and the keys deleted) and the journal is fsynced, so a change costs
// what it changes, not the size of the set. When the journal outgrows the
// snapshot, the whole set is written as a new snapshot atomically
// (temporary file, fsync, rename, fsync of the directory) and the journal
// is emptied. After a crash the store holds every change that returned;
// a last line torn by the crash (its change never returned) is dropped.
// Methods are safe for concurrent use.
type Store struct {
	path string
	mu   sync.Mutex // serializes changes and writes; set has its own lock
	set  Set

	journal  *os.File // open for appending; nil until the first append
	jsize    int64    // bytes in the journal
	snapSize int64    // bytes in the snapshot
	fullNext bool     // the journal may hold garbage: write a snapshot next
}

// minJournal is how large the journal may grow before it is folded into
// a snapshot, whatever the snapshot's size (a variable for tests).
var minJournal int64 = 1 << 20

// journalRecord is one line of the journal: the set's revision after the
// change, the resources put (canonical encodings) and the keys deleted.
type journalRecord struct {
	Revision uint64            `json:"revision"`
	Put      []json.RawMessage `json:"put,omitempty"`
	Delete   []journalKey      `json:"delete,omitempty"`
}

type journalKey struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (st *Store) journalPath() string { return st.path + ".journal" }

// OpenStore loads the store at path, or starts an empty one if the file
// does not exist (it is created on the first change). A file that does not
// decode or holds an invalid resource is an error naming the file; the file
// is left as it is for the operator to inspect.
func OpenStore(path string) (*Store, error) {
	st := &Store{path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		data = nil
	} else if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if data != nil {
		if err := st.loadSnapshot(data); err != nil {
			return nil, err
		}
	}
	if err := st.replay(); err != nil {
		return nil, err
	}
	// Deletions before the restart are not remembered: a watcher from
	// before gets a reset, one at this revision nothing.
	st.set.floor = st.set.rev
	for k, e := range st.set.items {
		e.rev = 0
		st.set.items[k] = e
	}
	return st, nil
}

func (st *Store) loadSnapshot(data []byte) error {
	path := st.path
	st.snapSize = int64(len(data))
	var snap snapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return fmt.Errorf("store %s is corrupt (left unchanged): %w", path, err)
	}
	for i, raw := range snap.Resources {
		r, err := DecodeJSON(raw)
		if err != nil {
			return fmt.Errorf("store %s is corrupt (left unchanged): resource %d: %w", path, i, err)
		}
		e, err := prepare(r)
		if err != nil {
			return fmt.Errorf("store %s is corrupt (left unchanged): resource %d: %w", path, i, err)
		}
		if _, dup := st.set.items[r.Key()]; dup {
			return fmt.Errorf("store %s is corrupt (left unchanged): resource %d: duplicate %s", path, i, r.Key())
		}
		st.set.applyLocked(e)
	}
	st.set.rev = snap.Revision
	return nil
}

// replay applies the journal's records newer than the snapshot. A last
// line that does not decode (or has no newline) is a change torn by a
// crash, never acknowledged: it is dropped, and the next change writes a
// snapshot and empties the journal. Any other bad line is corruption.
func (st *Store) replay() error {
	jp := st.journalPath()
	data, err := os.ReadFile(jp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	st.jsize = int64(len(data))
	for n := 1; len(data) > 0; n++ {
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		data = rest
		var rec journalRecord
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		err := dec.Decode(&rec)
		if !complete || err != nil {
			if len(data) == 0 { // the torn tail
				st.fullNext = true
				return nil
			}
			return fmt.Errorf("store journal %s is corrupt (left unchanged): line %d: %v", jp, n, err)
		}
		if rec.Revision <= st.set.rev {
			continue // already in the snapshot (a crash before the journal was emptied)
		}
		for i, raw := range rec.Put {
			r, err := DecodeJSON(raw)
			if err == nil {
				var e entry
				if e, err = prepare(r); err == nil {
					st.set.applyLocked(e)
				}
			}
			if err != nil {
				return fmt.Errorf("store journal %s is corrupt (left unchanged): line %d: resource %d: %w", jp, n, i, err)
			}
		}
		for _, k := range rec.Delete {
			st.set.deleteLocked(Key{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name})
		}
		st.set.rev = rec.Revision
	}
	return nil
}

// Path returns the file the store persists to.
func (st *Store) Path() string { return st.path }

// Set returns the in-memory set for reading. Change it only through the
// Store, or the change is not persisted.
func (st *Store) Set() *Set { return &st.set }

// Apply validates all resources first, then applies them and persists the
// result if anything changed, returning how many changed. If any resource
// is invalid or the write fails, nothing changes, in memory or on disk.
func (st *Store) Apply(rs ...Resource) (changed int, err error) {
	es := make([]entry, len(rs))
	for i, r := range rs {
		if es[i], err = prepare(r); err != nil {
			return 0, err
		}
	}
	return st.applyEntries(es)
}

// ApplyDecoded is Apply for resources fresh from DecodeJSON (decoded,
// normalized and validated) that the caller hands over: the store keeps
// them as they are, without Apply's copy and second validation (a JSON
// round trip each, a third of an admin apply's CPU with 20 000 imports).
// The caller must not use them afterwards.
func (st *Store) ApplyDecoded(rs ...Resource) (changed int, err error) {
	es := make([]entry, len(rs))
	for i, r := range rs {
		normalize(r)
		data, err := json.Marshal(r)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.Key(), err)
		}
		es[i] = entry{res: r, json: data}
	}
	return st.applyEntries(es)
}

// applyEntries applies prepared entries and persists the result if
// anything changed, returning how many changed.
func (st *Store) applyEntries(es []entry) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n, ok, err := st.putInPlace(es); ok {
		return n, err
	}
	return st.update(func(s *Set) int {
		n := 0
		for _, e := range es {
			if s.applyLocked(e) {
				n++
			}
		}
		return n
	})
}

// Delete removes resources by key and persists the result, returning how
// many were there.
func (st *Store) Delete(keys ...Key) (deleted int, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.update(func(s *Set) int {
		n := 0
		for _, k := range keys {
			if s.deleteLocked(k) {
				n++
			}
		}
		return n
	})
}

// putInPlace applies puts without update's copy of the set (a copy of
// 20 000 resources for every apply of a few thousand was most of the
// store's cost left): it finds what would change under the read lock
// (st.mu keeps other writers out meanwhile), journals exactly that, and
// only then puts it in place, so readers never see a change that is not
// durable. ok is false, with nothing done, when the change needs a
// snapshot instead (update does that). Puts never prune deletions, which
// is what makes the journal record computable before the change.
func (st *Store) putInPlace(es []entry) (n int, ok bool, err error) {
	if st.snapshotDue(false) {
		return 0, false, nil
	}
	s := &st.set
	s.mu.RLock()
	var eff []entry
	batch := map[Key]int{} // key → index in eff of its last change
	for _, e := range es {
		k := e.res.Key()
		cur, had := s.items[k]
		if i, ok := batch[k]; ok {
			cur, had = eff[i], true
		}
		if had && bytes.Equal(cur.json, e.json) {
			continue
		}
		batch[k] = len(eff)
		eff = append(eff, e)
	}
	old := s.rev
	s.mu.RUnlock()
	if len(eff) == 0 {
		return 0, true, nil
	}
	puts := make([][]byte, 0, len(batch))
	for _, i := range batch {
		puts = append(puts, eff[i].json)
	}
	if err := st.appendJournal(old+uint64(len(eff)), puts, nil); err != nil {
		return 0, true, err
	}
	s.mu.Lock()
	for _, e := range eff {
		s.applyLocked(e)
	}
	s.mu.Unlock()
	return len(eff), true, nil
}

// update runs change on a copy of the set, writes the copy if change
// reports changes, and only then makes it current. st.mu must be held.
func (st *Store) update(change func(*Set) int) (int, error) {
	st.set.mu.RLock()
	next := Set{rev: st.set.rev, floor: st.set.floor, items: make(map[Key]entry, len(st.set.items)), tombs: make(map[Key]uint64, len(st.set.tombs))}
	for k, e := range st.set.items {
		next.items[k] = e // entries are never modified in place
	}
	for k, r := range st.set.tombs {
		next.tombs[k] = r
	}
	old := next.rev
	st.set.mu.RUnlock()
	n := change(&next)
	if n == 0 {
		return 0, nil
	}
	// A Go map keeps the table it grew to: a set emptied by a mass delete
	// (20 000 imports) would hold its 20 000-entry table until the next
	// delete, as applies change it in place (putInPlace).
	if before := len(st.set.items); before >= 1024 && len(next.items)*4 < before {
		next.items = maps.Collect(maps.All(next.items))
	}
	if err := st.persist(&next, old); err != nil {
		return 0, err
	}
	st.set.mu.Lock()
	st.set.rev, st.set.items, st.set.tombs, st.set.floor = next.rev, next.items, next.tombs, next.floor
	st.set.notifyLocked()
	st.set.mu.Unlock()
	return n, nil
}

// persist makes the change from revision old to s durable: a journal
// record, or a snapshot when the journal is due for folding (or cannot
// tell the change: deletions pruned, or it may hold garbage).
func (st *Store) persist(s *Set, old uint64) error {
	if st.snapshotDue(s.floor > old) {
		return st.snapshot(s)
	}
	var puts [][]byte
	for _, e := range s.items {
		if e.rev > old {
			puts = append(puts, e.json)
		}
	}
	var dels []journalKey
	for k, r := range s.tombs {
		if r > old {
			dels = append(dels, journalKey{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name})
		}
	}
	return st.appendJournal(s.rev, puts, dels)
}

// snapshotDue reports whether the next change must be written as a
// snapshot: the journal is due for folding, may hold garbage, or cannot
// tell the change (pruned: deletions were forgotten).
func (st *Store) snapshotDue(pruned bool) bool {
	return st.fullNext || st.snapSize == 0 || pruned || st.jsize > max(minJournal, st.snapSize)
}

// appendJournal makes a change durable as one journal line: the set's
// revision after it, the resources put and the keys deleted.
func (st *Store) appendJournal(rev uint64, puts [][]byte, dels []journalKey) error {
	// The journalRecord's JSON written by hand: the puts are canonical
	// encodings already, which json.Marshal would validate and compact
	// again (a third of a gateway's store CPU with thousands per apply).
	line := strconv.AppendUint([]byte(`{"revision":`), rev, 10)
	for i, p := range puts {
		if i == 0 {
			line = append(line, `,"put":[`...)
		} else {
			line = append(line, ',')
		}
		line = append(line, p...)
	}
	if len(puts) > 0 {
		line = append(line, ']')
	}
	if len(dels) > 0 {
		b, err := json.Marshal(dels)
		if err != nil {
			return fmt.Errorf("encode store journal: %w", err)
		}
		line = append(append(line, `,"delete":`...), b...)
	}
	line = append(line, '}', '\n')
	if st.journal == nil {
		f, err := os.OpenFile(st.journalPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("write %s: %w", st.journalPath(), err)
		}
		st.journal = f
		if st.jsize == 0 {
			// A new journal's directory entry must be durable too.
			if err := syncDir(filepath.Dir(st.path)); err != nil {
				return err
			}
		}
	}
	if _, err := st.journal.Write(line); err != nil {
		st.fullNext = true // part of the line may be there
		return fmt.Errorf("write %s: %w", st.journalPath(), err)
	}
	if err := st.journal.Sync(); err != nil {
		st.fullNext = true
		return fmt.Errorf("write %s: %w", st.journalPath(), err)
	}
	st.jsize += int64(len(line))
	return nil
}

// snapshot writes the whole set and empties the journal. A crash between
// the two leaves journal records the snapshot already holds, which
// replay skips by revision.
func (st *Store) snapshot(s *Set) error {
	n, err := st.write(s)
	if err != nil {
		return err
	}
	st.snapSize = n
	if st.journal != nil {
		st.journal.Close()
		st.journal = nil
	}
	if err := os.Truncate(st.journalPath(), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.fullNext = true
		return fmt.Errorf("empty %s: %w", st.journalPath(), err)
	}
	st.jsize, st.fullNext = 0, false
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func (st *Store) write(s *Set) (int64, error) {
	keys := make([]Key, 0, len(s.items))
	for k := range s.items {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	// The snapshot's JSON written by hand from the canonical encodings,
	// one resource a line: re-encoding (or indenting) thousands of them
	// on every apply cost more than the write.
	size := 64
	for _, k := range keys {
		size += len(s.items[k].json) + 6
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	fmt.Fprintf(buf, "{\n  \"revision\": %d,\n  \"resources\": [", s.rev)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    ")
		buf.Write(s.items[k].json)
	}
	if len(keys) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("]\n}\n")
	return int64(buf.Len()), atomicfile.Write(st.path, buf.Bytes(), 0o600)
}
