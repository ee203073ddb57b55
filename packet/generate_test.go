package packet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
)

// TestGeneratedUpToDate rebuilds the BPF objects from bpf/packet.c with
// scripts/bpf.sh and fails if the committed ones differ: same programs
// (instruction by instruction), same maps, same Go bindings. It needs the
// pinned compiler, clang-14 (scripts/setup.sh installs it).
func TestGeneratedUpToDate(t *testing.T) {
	for _, cmd := range []string{"clang-14", "llvm-strip-14"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("%s is not installed (scripts/setup.sh and scripts/bpf.sh install it)", cmd)
		}
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skip("libbpf-dev is not installed (scripts/setup.sh and scripts/bpf.sh install it)")
	}
	dir := t.TempDir()
	cmd := exec.Command("../scripts/bpf.sh", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/bpf.sh: %v\n%s", err, out)
	}
	for _, target := range []string{"bpfel", "bpfeb"} {
		obj := "packet_" + target + ".o"
		fresh, err := ebpf.LoadCollectionSpec(filepath.Join(dir, obj))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := describe(committed), describe(fresh); a != b {
			t.Errorf("%s is stale: run make bpf and commit the result\ncommitted:\n%s\nrebuilt:\n%s", obj, a, b)
		}
		gofile := "packet_" + target + ".go"
		want, err := os.ReadFile(filepath.Join(dir, gofile))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(gofile)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale: run make bpf and commit the result", gofile)
		}
	}
}

// describe prints what the kernel would be given: each program's
// instructions and each map's shape, not the ELF's incidental bytes.
func describe(spec *ebpf.CollectionSpec) string {
	s := ""
	for _, name := range sortedKeys(spec.Maps) {
		m := spec.Maps[name]
		s += fmt.Sprintf("map %s: %v key %d value %d max %d flags %#x pin %v\n",
			name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags, m.Pinning)
	}
	for _, name := range sortedKeys(spec.Programs) {
		p := spec.Programs[name]
		s += fmt.Sprintf("program %s (%v, section %s):\n%v\n", name, p.Type, p.SectionName, p.Instructions)
	}
	return s
}
