package broker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"ok bolt", "id: b1\nidentity: {dir: ca}\nstore: {path: b.db}\n", ""},
		{"ok etcd", "id: b1\nidentity: {dir: ca}\nstore: {etcd: [http://127.0.0.1:2379]}\n", ""},
		{"ok lease", "id: b1\nidentity: {dir: ca}\nstore: {etcd: [http://127.0.0.1:2379], lease-ttl: 1m}\n", ""},
		{"lease without etcd", "id: b1\nidentity: {dir: ca}\nstore: {path: b.db, lease-ttl: 5s}\n", "lease-ttl"},
		{"lease fraction", "id: b1\nidentity: {dir: ca}\nstore: {etcd: [http://x:1], lease-ttl: 1500ms}\n", "lease-ttl"},
		{"lease negative", "id: b1\nidentity: {dir: ca}\nstore: {etcd: [http://x:1], lease-ttl: -2s}\n", "lease-ttl"},
		{"bad id", "id: B_1\nidentity: {dir: ca}\nstore: {path: b.db}\n", "id:"},
		{"no identity", "id: b1\nstore: {path: b.db}\n", "identity"},
		{"no store", "id: b1\nidentity: {dir: ca}\n", "store: path"},
		{"both stores", "id: b1\nidentity: {dir: ca}\nstore: {path: b.db, etcd: [http://x:1]}\n", "exclusive"},
		{"unknown field", "id: b1\nidentity: {dir: ca}\nstore: {path: b.db}\nlisten-on: x\n", "listen-on"},
		{"two documents", "id: b1\nidentity: {dir: ca}\nstore: {path: b.db}\n---\nid: b2\n", "more than one"},
		{"empty", "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "c.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(p)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Identity.Dir != filepath.Join(dir, "ca") || (c.Store.Path != "" && c.Store.Path != filepath.Join(dir, "b.db")) {
					t.Fatalf("relative paths not resolved against the file: %+v", c)
				}
				if strings.Contains(tc.yaml, "lease-ttl: 1m") && c.Store.LeaseTTL != time.Minute {
					t.Fatalf("lease-ttl 1m read as %v", c.Store.LeaseTTL)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}
