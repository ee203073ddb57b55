package testenv

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
)

// BPFGeneratedUpToDate rebuilds package pkg's BPF objects (pkg as
// scripts/bpf.sh names it: "packet", "tunnel/wancc") into a temporary
// directory and fails t if the committed ones differ: same programs
// (instruction by instruction), same maps, same Go bindings. It skips
// without the pinned compiler, clang-14 (scripts/setup.sh installs it).
func BPFGeneratedUpToDate(t *testing.T, pkg string) {
	t.Helper()
	for _, cmd := range []string{"clang-14", "llvm-strip-14"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("%s is not installed (scripts/setup.sh and scripts/bpf.sh install it)", cmd)
		}
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skip("libbpf-dev is not installed (scripts/setup.sh and scripts/bpf.sh install it)")
	}
	root := moduleRoot()
	dir := t.TempDir()
	if out, err := exec.Command(filepath.Join(root, "scripts", "bpf.sh"), pkg, dir).CombinedOutput(); err != nil {
		t.Fatalf("scripts/bpf.sh %s: %v\n%s", pkg, err, out)
	}
	name := filepath.Base(pkg)
	for _, target := range []string{"bpfel", "bpfeb"} {
		obj := name + "_" + target + ".o"
		fresh, err := ebpf.LoadCollectionSpec(filepath.Join(dir, obj))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := ebpf.LoadCollectionSpec(filepath.Join(root, pkg, obj))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := describeSpec(committed), describeSpec(fresh); a != b {
			t.Errorf("%s is stale: run make bpf and commit the result\ncommitted:\n%s\nrebuilt:\n%s", obj, a, b)
		}
		gofile := name + "_" + target + ".go"
		want, err := os.ReadFile(filepath.Join(dir, gofile))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, pkg, gofile))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale: run make bpf and commit the result", gofile)
		}
	}
}

// describeSpec prints what the kernel would be given: each program's
// instructions and each map's shape, not the ELF's incidental bytes.
func describeSpec(spec *ebpf.CollectionSpec) string {
	s := ""
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		m := spec.Maps[name]
		s += fmt.Sprintf("map %s: %v key %d value %d max %d flags %#x pin %v\n",
			name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags, m.Pinning)
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Programs)) {
		p := spec.Programs[name]
		s += fmt.Sprintf("program %s (%v, section %s):\n%v\n", name, p.Type, p.SectionName, p.Instructions)
	}
	return s
}
