package packet

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
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

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "name"},
		{Config{Name: "Gw_1"}, "name"},
		{Config{Name: "gw", PinRoot: "rel"}, "pinRoot"},
		{Config{Name: "gw", Tunnel: "much-too-long-name"}, "tunnel"},
		{Config{Name: "gw", VNI: 1 << 24}, "vni"},
		{Config{Name: "gw", UnderlayMTU: 500}, "underlayMTU"},
		{Config{Name: "gw", PortMin: 2000, PortMax: 1000}, "ports"},
		{Config{Name: "gw", Tables: 65}, "tables"},
		{Config{Name: "gw", FlowEntries: -1}, "flowEntries"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
	if err := (&Config{Name: "gw-1"}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if mss := (&Config{Name: "gw"}).MSS(); mss != 1410 {
		t.Errorf("MSS on a 1500-byte underlay: %d, want 1410", mss)
	}
}

// TestCounterNames checks CounterNames against enum counter in
// bpf/packet.c, name by name (clang leaves the enum out of the object's
// BTF: no map or function keeps its type).
func TestCounterNames(t *testing.T) {
	src, err := os.ReadFile("bpf/packet.c")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)enum counter \{(.*?)\};`).FindSubmatch(src)
	if block == nil {
		t.Fatal("enum counter not found in bpf/packet.c")
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(C_[A-Z0-9_]+),`).FindAllSubmatch(block[1], -1) {
		if n := string(m[1]); n != "C_COUNTERS" {
			names = append(names, strings.ToLower(strings.TrimPrefix(n, "C_")))
		}
	}
	if !slices.Equal(names, CounterNames) {
		t.Errorf("CounterNames = %v\nbpf/packet.c says %v", CounterNames, names)
	}
	spec, err := loadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if n := int(spec.Maps["counters"].MaxEntries); n != len(CounterNames) {
		t.Errorf("the counters map has %d entries, CounterNames %d", n, len(CounterNames))
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
