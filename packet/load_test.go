package packet

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/ring"
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
	if d.Program("lan_ingress") == nil || d.Program("lan_ingress_l3") == nil || d.Program("tun_ingress") == nil {
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
// bpf/packet.c, FragmentCounterNames against enum frag_counter and
// MTUCounterNames against enum mtu_counter, name by name (clang leaves the enums out of the object's BTF: no map or function
// keeps their types).
func TestCounterNames(t *testing.T) {
	src, err := os.ReadFile("bpf/packet.c")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := loadPacket()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		enum, prefix, m string
		names           []string
	}{
		{"counter", "C_", "counters", CounterNames},
		{"frag_counter", "F_", "frag_counters", FragmentCounterNames},
		{"mtu_counter", "M_", "mtu_counters", MTUCounterNames},
	} {
		block := regexp.MustCompile(`(?s)enum ` + c.enum + ` \{(.*?)\};`).FindSubmatch(src)
		if block == nil {
			t.Fatalf("enum %s not found in bpf/packet.c", c.enum)
		}
		var names []string
		for _, m := range regexp.MustCompile(`(?m)^\s*(`+c.prefix+`[A-Z0-9_]+),`).FindAllSubmatch(block[1], -1) {
			if n := string(m[1]); n != c.prefix+"COUNTERS" {
				names = append(names, strings.ToLower(strings.TrimPrefix(n, c.prefix)))
			}
		}
		if !slices.Equal(names, c.names) {
			t.Errorf("names of enum %s = %v\nbpf/packet.c says %v", c.enum, c.names, names)
		}
		if n := int(spec.Maps[c.m].MaxEntries); n != len(c.names) {
			t.Errorf("the %s map has %d entries, the Go names %d", c.m, n, len(c.names))
		}
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

// TestIncompatiblePins: pins whose maps differ from this version's (here:
// another flow map size) are refused with a message saying what to do,
// and Teardown removes them without loading them.
func TestIncompatiblePins(t *testing.T) {
	pins := testenv.BPFFS(t)
	d := loadTest(t, Config{PinRoot: pins, FlowEntries: 64})
	must(t, d.SetPeers(map[netip.Addr]Peer{netip.MustParseAddr("192.0.2.1"): {Alive: true}}))
	d.Close()
	_, err := Load(Config{Name: "test", PinRoot: pins, FlowEntries: 128}, nil)
	if err == nil || !strings.Contains(err.Error(), "tear the gateway's packet mode down") {
		t.Fatalf("loading over incompatible pins: %v", err)
	}
	must(t, Teardown(context.Background(), Config{Name: "test", PinRoot: pins, Tunnel: "stv-absent"}))
	if _, err := os.Stat(filepath.Join(pins, "test")); !os.IsNotExist(err) {
		t.Fatalf("pin directory after teardown: %v", err)
	}
	d2 := loadTest(t, Config{PinRoot: pins, FlowEntries: 128})
	var v []byte
	if err := d2.coll.Maps["peers"].Lookup([]byte{192, 0, 2, 1}, &v); err == nil {
		t.Error("a peer survived teardown")
	}
}

// TestMaglevMapping: the buckets are written through the mapped memory, a
// rewrite writes the changed ones, and what the map holds is what a lookup
// returns; pins of a version whose maglev map has no mapping are adopted
// and written with map updates, to the same contents.
func TestMaglevMapping(t *testing.T) {
	gws := map[string]netip.Addr{"g1": netip.MustParseAddr("192.0.2.1"), "g2": netip.MustParseAddr("192.0.2.2")}
	tb, err := ring.New([]string{"g1", "g2"}, ring.Options{})
	must(t, err)
	check := func(d *Datapath, view *ring.Table) {
		t.Helper()
		_, owners := view.Owners()
		members := view.Members()
		for i := 0; i < len(owners); i += 97 {
			var v [4]byte
			must(t, d.coll.Maps["maglev"].Lookup(uint32(ring.DefaultSize+i), &v))
			if got, want := netip.AddrFrom4(v), gws[members[owners[i]]]; got != want {
				t.Fatalf("bucket %d: %v, want %v", i, got, want)
			}
		}
	}
	for _, mapped := range []bool{true, false} {
		pins := testenv.BPFFS(t)
		if !mapped {
			// A maglev map pinned as earlier versions made it.
			spec, err := loadPacket()
			must(t, err)
			ms := spec.Maps["maglev"].Copy()
			ms.MaxEntries = uint32(DefaultTables * ring.DefaultSize)
			ms.Pinning = ebpf.PinNone
			m, err := ebpf.NewMap(ms)
			must(t, err)
			must(t, os.MkdirAll(filepath.Join(pins, "test"), 0o700))
			must(t, m.Pin(filepath.Join(pins, "test", "maglev")))
			m.Close()
		}
		d := loadTest(t, Config{PinRoot: pins})
		if (d.maglev != nil) != mapped {
			t.Fatalf("mapped %v, want %v", d.maglev != nil, mapped)
		}
		must(t, d.SetTable(1, tb, gws))
		check(d, tb)
		down := tb.WithDown(map[string]bool{"g2": true})
		must(t, d.SetTable(1, down, gws))
		check(d, down)
		must(t, d.SetTable(1, tb, gws))
		check(d, tb)
	}
}

// TestLoadNeedsBPFFS: a pin root on a filesystem other than bpffs (here the
// test's temporary directory) fails Load with an error that names bpffs
// and the path, before anything is loaded (docs/packet.md, "The gateway":
// nothing falls back silently).
func TestLoadNeedsBPFFS(t *testing.T) {
	root := filepath.Join(t.TempDir(), "pins")
	_, err := Load(Config{Name: "test", PinRoot: root}, nil)
	if err == nil || !strings.Contains(err.Error(), "not on a bpffs mount") || !strings.Contains(err.Error(), root) {
		t.Fatalf("Load with pinRoot %s on no bpffs: %v, want an error naming bpffs and the path", root, err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("Load made the pin root anyway: %v", err)
	}
}

// TestAttachNamesMissingDevice: Attach to a LAN device the node does not
// have fails with an error naming the device, and attaches and creates
// nothing: no tunnel device, no pinned link.
func TestAttachNamesMissingDevice(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.Netns(t, testenv.UniqueName("pktdev"))
	d := loadTest(t, Config{LAN: "nosuchlan0"})
	err := testenv.InNetns(ns, func() error { return d.Attach(context.Background()) })
	if err == nil || !strings.Contains(err.Error(), `lan "nosuchlan0"`) {
		t.Fatalf("Attach to a missing LAN device: %v, want an error naming it", err)
	}
	if out := testenv.Run(t, "ip", "-n", ns, "-br", "link"); strings.Contains(out, "stv-") {
		t.Errorf("a tunnel device was made anyway:\n%s", out)
	}
	for _, pin := range []string{pinLAN, pinTunnel} {
		if _, err := os.Stat(filepath.Join(d.dir, pin)); !os.IsNotExist(err) {
			t.Errorf("link pin %s after the failed attach: %v", pin, err)
		}
	}
}
