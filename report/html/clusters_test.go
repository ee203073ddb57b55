package html

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClustersSection renders a run on clusters from a metadata.json of
// the shape lab/kube writes (testdata/clusters-metadata.json; lab/kube's
// TestRunOnClusters renders a real one) and checks the cluster facts are
// on the page, and that a run in the namespace lab has no such section.
func TestClustersSection(t *testing.T) {
	run := syntheticRun(20, []string{"lcl"}, []string{"echo"}, map[string][]int{"echo": {1000}})
	dir := writeRunDir(t, run)
	clusters, err := os.ReadFile(filepath.Join("testdata", "clusters-metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]json.RawMessage
	b, err := os.ReadFile(filepath.Join(dir, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatal(err)
	}
	md["clusters"] = clusters
	if b, err = json.Marshal(md); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := Write(&page, got); err != nil {
		t.Fatal(err)
	}
	p := parse(t, page.Bytes())
	rows := func(id string) []string {
		n := p.byID(id)
		if n == nil {
			t.Fatalf("no table #%s", id)
		}
		var out []string
		for _, tr := range elements(n, "tr")[1:] {
			var cells []string
			for _, td := range elements(tr, "td") {
				cells = append(cells, text(td))
			}
			out = append(out, strings.Join(cells, " | "))
		}
		return out
	}
	for id, want := range map[string][]string{
		"clusters-table": {
			"a | server | https://10.201.0.1:6443 | v1.34.1 | unknown (no known CNI DaemonSet or node annotation; node-level plugins are not visible through the API) | 10.200.128.1 (seen by cluster b's pod load: NodePort 10.202.0.1:31234 saw 10.200.128.1; no answer by pod IP 10.245.0.4:18084)",
			"b | client | https://10.202.0.1:6443 | v1.34.1 | flannel (DaemonSet kube-flannel/kube-flannel-ds) | not detected: cluster b's pod strait-lab-x1/load reached no peer listener of cluster a (NodePort 10.201.0.1:30001)",
		},
		"cluster-nodes": {
			"a | n1 | linux/amd64 | 6.18.0-test | Debian GNU/Linux 13 (trixie) | containerd://1.7.24 | v1.34.1 | 10.244.0.0/24 | 10.201.0.1 | yes",
			"b | n1 | linux/amd64 | 6.18.0-test | Debian GNU/Linux 13 (trixie) | containerd://1.7.24 | v1.34.1 | 10.245.0.0/24, fd00:245::/64 | 10.202.0.1 | yes",
		},
		"cluster-direct": {
			"1 | nodeport: a NodePort Service on the server pod's node",
			"2 | pod: the server pod's IP, routed between the clusters",
		},
		"cluster-emulation": {
			"2 | d9 | delay 9ms | a → 10.202.0.1/32, 10.245.0.0/24b → 10.201.0.1/32, 10.244.0.0/24",
		},
	} {
		got := rows(id)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("table #%s:\n%s\nwant\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if !bytes.Contains(page.Bytes(), []byte(`href="#clusters"`)) {
		t.Error("the contents do not list the clusters section")
	}

	// The namespace lab's page: no clusters section, no entry for it.
	page.Reset()
	if err := Write(&page, run); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`id="clusters"`, `href="#clusters"`, "cluster-nodes"} {
		if bytes.Contains(page.Bytes(), []byte(bad)) {
			t.Errorf("a namespace-lab page has %q", bad)
		}
	}
}
