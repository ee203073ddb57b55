package packet

import (
	"sort"
	"testing"

	"github.com/strait-net/strait/internal/testenv"
)

func loadTest(t testing.TB, cfg Config) *Datapath {
	t.Helper()
	if cfg.PinRoot == "" {
		cfg.PinRoot = testenv.BPFFS(t)
	}
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	d, err := Load(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestLoad(t *testing.T) {
	d := loadTest(t, Config{})
	if d.Program("lan_ingress") == nil || d.Program("tun_ingress") == nil {
		t.Fatal("programs missing")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
