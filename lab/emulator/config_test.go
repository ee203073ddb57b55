package emulator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

func TestConfigRoundTrip(t *testing.T) {
	want := Config{
		Links: []Link{{
			Name: "core-edge",
			A:    Endpoint{Netns: "lab-core", Device: "s-edge"},
			B:    Endpoint{Netns: "lab-edge", Device: "s-core"},
			AtoB: emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Distribution: emulation.Normal, Loss: 0.08, Rate: 1e9},
			BtoA: emulation.Params{Delay: 5 * time.Millisecond, Limit: 500, Reorder: true},
		}, {
			Name: "core-far", Veth: true,
			A:    Endpoint{Netns: "lab-core", Device: "s-far"},
			B:    Endpoint{Netns: "lab-far", Device: "s-core"},
			AtoB: emulation.Params{Loss: 1},
			BtoA: emulation.Params{Delay: 5 * time.Millisecond},
		}},
		MTU: 1400, Seed: 42, ReadyFile: "/run/x.ready",
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "emu.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig(%s): %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\njson %s", got, want, b)
	}
}

func TestConfigErrors(t *testing.T) {
	link := `"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"}`
	for _, tc := range []struct{ in, want string }{
		{`{}`, "links: need at least one link"},
		{`{"links":[{` + link + `}],"mtu":100}`, "mtu 100"},
		{`{"links":[{` + link + `,"mtu":70000}]}`, "links[0].mtu 70000: must be between 576 and 65000"},
		{`{"links":[{` + link + `,"a-to-b":{"delay":"5"}}]}`, "links[0].a-to-b: delay"},
		{`{"links":[{` + link + `,"b-to-a":{"rate":"1000"}}]}`, "links[0].b-to-a: rate"},
		{`{"links":[{` + link + `,"a-to-b":{"loss":"120%"}}]}`, "links[0].a-to-b: loss"},
		{`{"links":[{"name":"l","a":{"device":"waytoolongname16"},"b":{"device":"b"}}]}`, "links[0].a.device"},
		{`{"links":[{"name":"l","a":{"netns":"../x","device":"a"},"b":{"device":"b"}}]}`, "links[0].a.netns"},
		{`{"links":[{"name":"l","a":{"device":"a"},"b":{"device":"a"}}]}`, "links[0].b.device \"a\": already used"},
		{`{"links":[{` + link + `},{` + link + `}]}`, "links[1].name"},
		{`{"links":[{` + link + `}],"speed":1}`, `unknown field "speed"`},
		{`{"links":[{` + link + `,"veth":true,"a-to-b":{"loss":"1%"}}]}`, "links[0].veth: a veth link must be delayed one way only"},
		{`{"links":[{` + link + `,"veth":true,"a-to-b":{"delay":"1ms"},"b-to-a":{"jitter":"1ms","delay":"2ms"}}]}`, "links[0].veth: a veth link must be delayed one way only"},
		{`{"links":[{` + link + `}],"mtu":"big"}`, "mtu: cannot use"},
		{`{"links":{}}`, "links: cannot use"},
		{`{"links":[{` + link + `}]} {}`, "unexpected data"},
	} {
		_, err := parseConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"},"a-to-b":{"delay":"5ms","jitter":"1ms","distribution":"pareto","loss":"0.1%","loss-correlation":"25%","rate":"1gbit","limit":10,"reorder":true}}],"mtu":1500,"seed":3,"ready-file":"r"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"links":[{"name":"","a":{},"b":{}}]}`))
	// Edges: nothing, cut short, numbers past their types, negative
	// ones, invalid UTF-8 in names.
	f.Add([]byte{})
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","dev`))
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"},"a-to-b":{"delay":"9223372036854775808ns","rate":"1e400gbit","limit":18446744073709551616}}],"mtu":99999999999999999999,"seed":18446744073709551616}`))
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"},"a-to-b":{"rate":"1gbit"},"mtu":9000}],"mtu":576}`))
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"},"mtu":-9000}]}`))
	f.Add([]byte(`{"links":[{"name":"l","a":{"netns":"x","device":"a0"},"b":{"netns":"y","device":"b0"},"a-to-b":{"delay":"-5ms","loss":"-1%","limit":-1}}],"mtu":-1,"seed":-3}`))
	f.Add([]byte("{\"links\":[{\"name\":\"\xff\xfe\",\"a\":{\"netns\":\"\xc3\",\"device\":\"a0\"},\"b\":{\"netns\":\"y\",\"device\":\"b0\"}}]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parseConfig accepted a config that does not validate: %v", err)
		}
		// What parses must survive a round trip unchanged.
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := parseConfig(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, c2)
		}
	})
}
