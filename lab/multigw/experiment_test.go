package multigw

import (
	"strings"
	"testing"
)

func TestBuiltinsParseAndPlan(t *testing.T) {
	for _, name := range Builtins() {
		e, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range e.Gateways {
			plan, err := e.Topology("x", n).Plan()
			if err != nil {
				t.Fatalf("%s with %d gateways: %v", name, n, err)
			}
			if got := len(plan.Gateways("a")); got != n {
				t.Errorf("%s: cluster a has %d gateways, want %d", name, got, n)
			}
			// Every gateway has exactly one WAN link: its uplink.
			for _, gw := range append(plan.Gateways("a"), plan.Gateways("b")...) {
				wan := 0
				for _, l := range plan.Links {
					if l.Class == "wan" && (l.A.Node == gw.ID || l.B.Node == gw.ID) {
						wan++
					}
				}
				if wan != 1 {
					t.Errorf("%s: %s has %d WAN links, want 1", name, gw.ID, wan)
				}
			}
		}
	}
}

func TestValidateNamesFields(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"kind: nope\ngateways: [1]\n", `kind "nope": must be failover or aggregate`},
		{"kind: aggregate\ngateways: [0]\nstream: {parallel: 4, duration: 1s}\n", "gateways[0]: 0, must be 1 to 8"},
		{"kind: aggregate\ngateways: [1]\nstream: {parallel: 0, duration: 1s}\n", "stream.parallel 0: must be 1 to 256"},
		{"kind: aggregate\ngateways: [1]\nuplink: {rate: fast}\nstream: {parallel: 1, duration: 1s}\n", "uplink: rate:"},
		{"kind: failover\ngateways: [3]\nprobe: {rate: 10, streams: 1, duration: 3s, kill-at: 2s, restart-at: 1s}\nvictims: [a/gw2]\n", "probe: need 0 < kill-at (2s) < restart-at (1s) < duration (3s)"},
		{"kind: failover\ngateways: [3]\nprobe: {rate: 10, streams: 1, duration: 3s, kill-at: 1s, restart-at: 2s}\nvictims: [a/gw4]\n", `victims[0] "a/gw4": no such gateway`},
		{"kind: failover\ngateways: [3]\nprobe: {rate: 10, streams: 1, duration: 3s, kill-at: 1s, restart-at: 2s}\nvictims: [c/x]\n", `victims[0] "c/x": must be a/gwK`},
		{"kind: failover\ngateways: [3]\nprobe: {rate: 10, streams: 1, duration: 3s, kill-at: 1s, restart-at: 2s, rejoin-pause: 1s}\nvictims: [b/gw2]\n",
			"probe.rejoin-pause 1s: need 0 <= rejoin-pause and restart-at (2s) + rejoin-pause < duration (3s)"},
		{"kind: aggregate\ngateways: [1]\nbogus: 1\n", "field bogus not found"},
		{"kind: aggregate\ngateways: [1]\nstream: {parallel: 1, duration: 1s}\ntool: nope\n", `tool "nope":`},
		{"kind: aggregate\ngateways: [1]\nstream: {parallel: 1, duration: 1s}\ntool: vxlan\n", `tool "vxlan": its gateways cannot be killed and restarted; use strait or strait-packet`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range Builtins() {
		b, _ := builtin.ReadFile("builtin/" + name + ".yaml")
		f.Add(b)
	}
	// Edges: nothing, cut short, numbers past their types, negative
	// ones, invalid UTF-8.
	f.Add([]byte{})
	f.Add([]byte("kind: aggregate\ngateways: [1, 2"))
	f.Add([]byte("kind: aggregate\ngateways: [99999999999999999999, 9223372036854775807]\nuplink: {delay: 2ms, rate: 100mbit}\nstream: {parallel: 9223372036854775807, duration: 9999999999h}\n"))
	f.Add([]byte("kind: failover\ngateways: [-1, 0]\nprobe: {rate: -5, streams: -1, duration: -1s, kill-at: -1s, restart-at: -2s}\nstream: {parallel: -48, duration: -8s}\n"))
	f.Add([]byte("kind: failover\ngateways: [3]\nprobe: {rate: 2147483648, streams: 1, duration: 2s, kill-at: 9223372036854775807ns, restart-at: 1s}\n"))
	f.Add([]byte("kind: \xff\xfe\ngateways: [2]\nvictims: [\xc3]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b)
		if err != nil {
			return
		}
		for _, n := range e.Gateways {
			if _, err := e.Topology("x", n).Plan(); err != nil {
				t.Fatalf("valid experiment %q gives an invalid topology: %v", b, err)
			}
		}
	})
}

func TestValidateFault(t *testing.T) {
	const base = "kind: failover\ngateways: [2]\nprobe: {rate: 10, streams: 1, duration: 3s, kill-at: 1s, restart-at: 2s}\nvictims: [a/gw2]\n"
	if _, err := Parse([]byte(base + "fault: unplug\n")); err == nil || !strings.Contains(err.Error(), `fault "unplug": must be kill or uplink-down`) {
		t.Errorf("fault unplug: %v", err)
	}
	for _, f := range []string{"", "fault: kill\n", "fault: uplink-down\ntool: strait-packet\n"} {
		if _, err := Parse([]byte(base + f)); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
}
