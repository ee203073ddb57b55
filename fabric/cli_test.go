package fabric_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/internal/testenv"
)

// TestCLI runs `strait fabric init` and `issue` as a user would, and loads
// what they wrote.
func TestCLI(t *testing.T) {
	bin := testenv.StraitBinary(t)
	root := t.TempDir()
	ca := filepath.Join(root, "ca")
	out := filepath.Join(root, "west")
	steps := []struct {
		name    string
		args    []string
		wantErr string // substring of stderr; "" means success
	}{
		{"init", []string{"init", "--dir", ca, "--clusterset", "demo"}, ""},
		{"init again", []string{"init", "--dir", ca, "--clusterset", "demo"}, "refusing to replace"},
		{"init bad clusterset", []string{"init", "--dir", filepath.Join(root, "x"), "--clusterset", "Demo_1"}, `clusterset "Demo_1" is not a DNS label`},
		{"init without clusterset", []string{"init", "--dir", filepath.Join(root, "x")}, "--clusterset: required"},
		{"issue", []string{"issue", "west", "--dir", ca, "--out", out, "--lifetime", "24h"}, ""},
		{"issue again rotates", []string{"issue", "west", "--dir", ca, "--out", out}, ""},
		{"issue east next to the CA", []string{"issue", "east", "--dir", ca}, ""},
		{"issue bad cluster", []string{"issue", "West.1", "--dir", ca}, `cluster "West.1" is not a DNS label`},
		{"issue without CA", []string{"issue", "west", "--dir", filepath.Join(root, "missing")}, "strait fabric init"},
		{"issue outliving the CA", []string{"issue", "west", "--dir", ca, "--lifetime", "1000000h"}, "outlive the CA"},
		{"issue without cluster", []string{"issue", "--dir", ca}, "accepts 1 arg"},
		{"init --force", []string{"init", "--dir", ca, "--clusterset", "demo2", "--force"}, ""},
	}
	for _, s := range steps {
		cmd := exec.Command(bin, append([]string{"fabric"}, s.args...)...)
		outb, err := cmd.CombinedOutput()
		if s.wantErr == "" {
			if err != nil {
				t.Fatalf("%s: %v\n%s", s.name, err, outb)
			}
		} else if err == nil || !strings.Contains(string(outb), s.wantErr) {
			t.Errorf("%s: err %v, output %q; want failure mentioning %q", s.name, err, outb, s.wantErr)
		}
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(ca, "ca.key"):    0o600,
		filepath.Join(ca, "ca.crt"):    0o644,
		filepath.Join(out, "west.key"): 0o600,
		filepath.Join(out, "west.crt"): 0o644,
		filepath.Join(out, "ca.crt"):   0o644,
		filepath.Join(ca, "east.key"):  0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
		}
	}
	// west was issued by the first CA, copied to out before --force
	// replaced it: it must still load from out.
	id, err := fabric.Load(fabric.Config{Dir: out, Cluster: "west"})
	if err != nil {
		t.Fatal(err)
	}
	if id.Clusterset() != "demo" || id.Cluster() != "west" {
		t.Errorf("identity %s/%s, want demo/west", id.Clusterset(), id.Cluster())
	}
	if got := id.Certificate().URIs[0].String(); got != "spiffe://demo/cluster/west" {
		t.Errorf("URI SAN %s", got)
	}
	// east sits next to a CA that --force replaced: its chain is broken,
	// and Load says so.
	if _, err := fabric.Load(fabric.Config{Dir: ca, Cluster: "east"}); err == nil {
		t.Error("a certificate of the replaced CA loaded")
	}
}
