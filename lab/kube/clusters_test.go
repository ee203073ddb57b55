package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseClusterMap(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"ok", "clusters: {a: {kubeconfig: a.kc, context: ca}, b: {}}\ndirect: nodeport\n", ""},
		{"unknown field", "clusters: {a: {kubeconfig: a.kc, ctx: ca}}\n", "field ctx not found"},
		{"unknown top field", "clusters: {a: {}}\ninstaled: x\n", "field instaled not found"},
		{"no clusters", "direct: pod\n", "clusters: name at least one"},
		{"empty", "", "parse clusters file: empty: want a YAML mapping"},
		{"two documents", "clusters: {a: {}}\n---\nclusters: {b: {}}\n", "parse clusters file: more than one YAML document"},
		{"trailing separator", "clusters: {a: {}}\n---\n", ""},
		{"bad name", "clusters: {A_1: {}}\n", `"A_1" is not a cluster name`},
		{"bad direct", "clusters: {a: {}}\ndirect: tunnel\n", `direct "tunnel": must be auto, pod or nodeport`},
		{"installed without service", "clusters: {a: {}}\ninstalled: foo.svc\n", "must contain {service}"},
		{"installed with a path", "clusters: {a: {}}\ninstalled: \"{service}/x\"\n", "must be a host name"},
		{"bad image", "clusters: {a: {}}\nimage: \"a b\"\n", `image "a b": not an image reference`},
		{"bad remote", "clusters: {a: {remote: [10.200.128.2, 10.0.0.0/33]}}\n", `clusters.a.remote: "10.0.0.0/33" is neither an IP address nor a prefix`},
		{"remote ok", "clusters: {a: {remote: [10.200.128.2, 10.96.0.0/12, \"fd00::1\"]}}\n", ""},
		{"installed ok", "clusters: {a: {}}\ninstalled: \"{service}.{namespace}.svc.clusterset.local\"\nexport: true\n", ""},
		{"sessions keep", "clusters: {a: {}}\nsessions: keep\n", ""},
		{"bad sessions", "clusters: {a: {}}\nsessions: drop\n", `sessions "drop": must be reset or keep`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseClusterMap([]byte(tc.in), "/x")
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if m.Direct == "" || m.Sessions == "" {
					t.Errorf("direct %q, sessions %q: no default", m.Direct, m.Sessions)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestClusterConfigErrors(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "a.kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: "t"}}]
contexts: [{name: ca, context: {cluster: c, user: u}}]
current-context: ca
`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := ParseClusterMap([]byte("clusters: {a: {kubeconfig: a.kubeconfig}, b: {kubeconfig: a.kubeconfig, context: nope}, c: {kubeconfig: missing.kubeconfig}}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := m.Config("a")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://192.0.2.1:6443" {
		t.Errorf("host %q", cfg.Host)
	}
	for name, want := range map[string]string{
		"b": `cluster b: kubeconfig ` + kc + `: context "nope" does not exist`,
		"c": `cluster c: kubeconfig: stat ` + filepath.Join(dir, "missing.kubeconfig"),
		"d": "cluster d: not in the clusters file (it has a, b, c)",
	} {
		if _, err := m.Config(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cluster %s: got %v, want an error containing %q", name, err, want)
		}
	}
}

func FuzzParseClusterMap(f *testing.F) {
	f.Add([]byte("clusters: {a: {kubeconfig: a.kc, context: ca}, b: {}}\ndirect: nodeport\n"))
	f.Add([]byte("clusters: {a: {remote: [10.200.128.2, 10.96.0.0/12]}}\nsessions: keep\n"))
	f.Add([]byte("clusters: {a: {}}\ninstalled: \"{service}.{namespace}.svc.clusterset.local\"\nexport: true\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseClusterMap(b, "/x")
		if err != nil {
			return
		}
		if len(m.Clusters) == 0 {
			t.Fatal("accepted a map without clusters")
		}
		for _, n := range m.Names() {
			if !clusterRE.MatchString(n) {
				t.Fatalf("accepted cluster name %q", n)
			}
		}
		switch m.Direct {
		case DirectAuto, DirectPod, DirectNodePort:
		default:
			t.Fatalf("accepted direct %q", m.Direct)
		}
		if m.Sessions != SessionsReset && m.Sessions != SessionsKeep {
			t.Fatalf("accepted sessions %q", m.Sessions)
		}
		if m.Installed != "" && !strings.Contains(m.Installed, "{service}") {
			t.Fatalf("accepted installed %q", m.Installed)
		}
		for n, c := range m.Clusters {
			if len(c.remote) != len(c.Remote) {
				t.Fatalf("cluster %s: remote %q parsed as %v", n, c.Remote, c.remote)
			}
			for _, p := range c.remote {
				if !p.IsValid() || p != p.Masked() {
					t.Fatalf("cluster %s: remote %q gave prefix %v", n, c.Remote, p)
				}
			}
		}
	})
}

func TestRemote(t *testing.T) {
	b, err := New(Options{Clusters: &ClusterMap{}})
	if err != nil {
		t.Fatal(err)
	}
	b.meta.Clusters["a"] = &ClusterInfo{Nodes: []NodeInfo{
		{Name: "a-n1", Addresses: "10.200.1.1,2001:db8::1", PodCIDRs: "10.100.1.0/24"},
		{Name: "a-n2", Addresses: "10.200.1.2"},
	}}
	var got []string
	for _, p := range b.remote("a") {
		got = append(got, p.String())
	}
	want := "10.200.1.1/32 2001:db8::1/128 10.100.1.0/24 10.200.1.2/32"
	if strings.Join(got, " ") != want {
		t.Errorf("remote(a) = %v, want %s", got, want)
	}
	if r := b.remote("b"); r != nil {
		t.Errorf("remote of an unknown cluster: %v", r)
	}
}
