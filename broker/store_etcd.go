package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdConfig says how to reach the etcd cluster several brokers share.
type EtcdConfig struct {
	// Endpoints are etcd client URLs, such as http://127.0.0.1:2379.
	Endpoints []string
	// Prefix namespaces the catalog's keys, so several clustersets can
	// share one etcd; default "/strait/".
	Prefix string
	// MaxTxnOps bounds the operations of one etcd transaction (etcd's
	// --max-txn-ops, default 128); larger Commits are split.
	MaxTxnOps int
	// LeaseTTL is how long a dead broker's membership outlives it
	// (seconds, default 2).
	LeaseTTL int64
}

// EtcdStore is the shared Store: brokers hold no state of their own, etcd's
// revisions are the catalog's revisions, and etcd's watch history is the
// resume window (as long as etcd keeps it before compaction).
type EtcdStore struct {
	cli    *clientv3.Client
	prefix string
	maxOps int
	ttl    int64

	closeOnce sync.Once
}

// OpenEtcd connects to etcd and checks that it answers.
func OpenEtcd(ctx context.Context, cfg EtcdConfig) (*EtcdStore, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd.endpoints: need at least one etcd client URL")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", cfg.Endpoints, err)
	}
	s := &EtcdStore{cli: cli, prefix: cfg.Prefix, maxOps: cfg.MaxTxnOps, ttl: cfg.LeaseTTL}
	if s.prefix == "" {
		s.prefix = "/strait/"
	}
	if s.maxOps <= 0 {
		s.maxOps = 128
	}
	if s.ttl <= 0 {
		s.ttl = 2
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Get(cctx, s.prefix+"probe"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v: %w", cfg.Endpoints, err)
	}
	return s, nil
}

// Commit implements Store. A change with more operations than fit in one
// etcd transaction is split; each part carries the condition key's put,
// so the next part is conditioned on the revision of the one before.
func (s *EtcdStore) Commit(ctx context.Context, cond Cond, puts []Entry, dels []string) (uint64, error) {
	per := s.maxOps - 1 // room for the condition key's own put
	if per < 1 {
		per = 1
	}
	var condPut *Entry
	if cond.Key != "" {
		for i := range puts {
			if puts[i].Key == cond.Key {
				condPut = &puts[i]
			}
		}
	}
	type op struct {
		put *Entry
		del string
	}
	ops := make([]op, 0, len(puts)+len(dels))
	for _, k := range dels {
		ops = append(ops, op{del: k})
	}
	for i := range puts {
		if &puts[i] != condPut {
			ops = append(ops, op{put: &puts[i]})
		}
	}
	var rev uint64
	for first := true; first || len(ops) > 0; first = false {
		n := min(per, len(ops))
		var then []clientv3.Op
		for _, o := range ops[:n] {
			if o.put != nil {
				then = append(then, clientv3.OpPut(s.prefix+o.put.Key, string(o.put.Value)))
			} else {
				then = append(then, clientv3.OpDelete(s.prefix+o.del))
			}
		}
		ops = ops[n:]
		if condPut != nil {
			then = append(then, clientv3.OpPut(s.prefix+condPut.Key, string(condPut.Value)))
		}
		txn := s.cli.Txn(ctx)
		if cond.Key != "" {
			k := s.prefix + cond.Key
			if cond.ModRev == 0 {
				txn = txn.If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			} else {
				txn = txn.If(clientv3.Compare(clientv3.ModRevision(k), "=", int64(cond.ModRev)))
			}
		}
		resp, err := txn.Then(then...).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd commit: %w", err)
		}
		if !resp.Succeeded {
			if rev != 0 {
				return 0, fmt.Errorf("%w (after committing part of the change at revision %d)", ErrConflict, rev)
			}
			return 0, ErrConflict
		}
		rev = uint64(resp.Header.Revision)
		if condPut != nil {
			cond.ModRev = rev
		}
	}
	return rev, nil
}

// Snapshot implements Store.
func (s *EtcdStore) Snapshot(ctx context.Context) ([]Entry, uint64, error) {
	resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	out := make([]Entry, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = Entry{Key: strings.TrimPrefix(string(kv.Key), s.prefix), Value: kv.Value, ModRev: uint64(kv.ModRevision)}
	}
	return out, uint64(resp.Header.Revision), nil
}

// Revision implements Store.
func (s *EtcdStore) Revision(ctx context.Context) (uint64, error) {
	resp, err := s.cli.Get(ctx, s.prefix+"probe", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcd revision: %w", err)
	}
	return uint64(resp.Header.Revision), nil
}

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return Entry{}, false, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Entry{}, false, nil
	}
	kv := resp.Kvs[0]
	return Entry{Key: key, Value: kv.Value, ModRev: uint64(kv.ModRevision)}, true, nil
}

// Watch implements Store. etcd revisions count every write to etcd, not
// only this prefix, so revisions a watcher sees may have gaps.
func (s *EtcdStore) Watch(ctx context.Context, after uint64, fn func(uint64, []Entry) error) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := s.cli.Watch(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(after)+1))
	for resp := range wc {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("etcd watch: %w", err)
		}
		// One response may hold several revisions; hand them over one
		// revision at a time, as the contract says.
		var cur uint64
		var batch []Entry
		for _, ev := range resp.Events {
			r := uint64(ev.Kv.ModRevision)
			if r != cur && len(batch) > 0 {
				if err := fn(cur, batch); err != nil {
					return err
				}
				batch = nil
			}
			cur = r
			e := Entry{Key: strings.TrimPrefix(string(ev.Kv.Key), s.prefix), ModRev: r}
			if ev.Type == clientv3.EventTypePut {
				e.Value = ev.Kv.Value
			}
			batch = append(batch, e)
		}
		if len(batch) > 0 {
			if err := fn(cur, batch); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("etcd watch: channel closed")
}

// Ephemeral implements Store with an etcd lease kept alive by the client:
// if the broker dies, the key goes after LeaseTTL.
func (s *EtcdStore) Ephemeral(ctx context.Context, key string, value []byte) (func(), error) {
	lease, err := s.cli.Grant(ctx, s.ttl)
	if err != nil {
		return nil, fmt.Errorf("etcd lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, s.prefix+key, string(value), clientv3.WithLease(lease.ID)); err != nil {
		return nil, fmt.Errorf("etcd put %s: %w", key, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ka, err := s.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("etcd keepalive: %w", err)
	}
	go func() {
		for range ka { // drain, as KeepAlive requires
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = s.cli.Revoke(rctx, lease.ID)
			rcancel()
		})
	}, nil
}

// Close implements Store.
func (s *EtcdStore) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.cli.Close() })
	return err
}
