package run

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{"60", 60, ""}, {"60B", 60, ""}, {"1KB", 1000, ""}, {"1kb", 1000, ""}, {"100KB", 100000, ""},
		{"1MB", 1000000, ""}, {"1KiB", 1024, ""}, {"1.5KB", 1500, ""}, {" 2 KB ", 2000, ""},
		{"1.5B", 0, "whole number"}, {"-1", 0, "not a size"}, {"1XB", 0, "unknown unit"},
		{"2GiB", 0, "up to 1GiB"}, {"", 0, "not a size"},
	} {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseExperimentErrors(t *testing.T) {
	const topo = `
topology:
  name: x
  clusters:
    - {name: a, nodes: [{name: gw}, {name: server}]}
    - {name: b, nodes: [{name: gw}, {name: client}]}
  wan: [{between: [a, b]}]
`
	for _, tc := range []struct{ body, err string }{
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", ""},
		{"name: E\n" + topo, "name \"E\""},
		{"name: e\n", "topology: missing"},
		{"name: e\n" + topo + "scenarios: [nope]\n", "scenarios[0]"},
		{"name: e\n" + topo + "scenarios: [lcl]\ntools: [magic]\n", "tools[0]: unknown tool \"magic\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/nope\nclient: b/client\n", "server: \"a/nope\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: ftp}]\n", "workloads[0].name \"ftp\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: static, payloads: [1KB]}]\n", "takes no request body"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\nload: {think: soon}\n", "load.think"},
		{"name: e\nbogus: 1\n", "field bogus not found"},
	} {
		_, err := Parse([]byte(tc.body), t.TempDir())
		if tc.err == "" {
			if err != nil {
				t.Errorf("Parse: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", tc.body, err, tc.err)
		}
	}
}

func TestBuiltinsParse(t *testing.T) {
	if len(Builtins()) == 0 {
		t.Fatal("no built-in experiments")
	}
	for _, name := range Builtins() {
		if _, err := LoadExperiment(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

func FuzzParseExperiment(f *testing.F) {
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: n}]}]}\nscenarios: [lcl]\n"))
	f.Add([]byte("name: e\nworkloads: [{name: echo, payloads: [1KB, '60']}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Must never panic, and never read a file for a fuzzed path.
		_, _ = Parse(b, "/nonexistent")
	})
}

// TestExamplesParse keeps the example experiments the README and the issue
// notes point to valid.
func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/experiments/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example experiments found")
	}
	for _, f := range files {
		if _, err := LoadExperiment(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
