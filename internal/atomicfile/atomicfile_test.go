package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesContentAndMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key.pem")
	if err := Write(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil || string(data) != "new" {
		t.Fatalf("content %q, %v; want new", data, err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory; want only %s (no temporary left)", len(ents), p)
	}
}

func TestAFailedWriteLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	// The rename over a directory fails after the temporary is written.
	blocked := filepath.Join(dir, "sub")
	if err := os.Mkdir(blocked, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blocked, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := Write(blocked, []byte("new"), 0o600)
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("Write over a non-empty directory = %v; want an error naming it", err)
	}
	if data, err := os.ReadFile(filepath.Join(blocked, "x")); err != nil || len(data) != 0 {
		t.Errorf("the directory's file changed: %q, %v", data, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the directory; want 1 (the temporary removed)", len(ents))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}
