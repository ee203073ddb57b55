package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/strait-net/strait/lab/emulation"
)

// The configuration file is JSON, with impairments written as in topology
// files (emulation.Spec):
//
//	{
//	  "links": [{
//	    "name": "core-edge",
//	    "a": {"netns": "lab-core", "device": "s-edge"},
//	    "b": {"netns": "lab-edge", "device": "s-core"},
//	    "a-to-b": {"delay": "5ms", "jitter": "1ms", "loss": "0.08%", "rate": "1gbit"},
//	    "b-to-a": {"delay": "5ms", "jitter": "1ms", "loss": "0.08%", "rate": "1gbit"}
//	  }, {
//	    "name": "core-far", "veth": true,
//	    "a": {"netns": "lab-core", "device": "s-far"},
//	    "b": {"netns": "lab-far", "device": "s-core"},
//	    "a-to-b": {"delay": "5ms"}, "b-to-a": {}
//	  }],
//	  "mtu": 1500,
//	  "seed": 42,
//	  "ready-file": "/run/strait/lab/emulator.ready"
//	}
//
// json.Marshal of a Config writes this form, so the lab builder and the
// emulator process share one definition.

type fileConfig struct {
	Links     []fileLink `json:"links"`
	MTU       int        `json:"mtu,omitempty"`
	Seed      uint64     `json:"seed,omitempty"`
	ReadyFile string     `json:"ready-file,omitempty"`
}

type fileEndpoint struct {
	Netns  string `json:"netns,omitempty"`
	Device string `json:"device"`
}

type fileLink struct {
	Name string         `json:"name"`
	A    fileEndpoint   `json:"a"`
	B    fileEndpoint   `json:"b"`
	AtoB emulation.Spec `json:"a-to-b"`
	BtoA emulation.Spec `json:"b-to-a"`
	MTU  int            `json:"mtu,omitempty"`
	Veth bool           `json:"veth,omitempty"`
}

// MarshalJSON writes the configuration file format LoadConfig reads.
func (c Config) MarshalJSON() ([]byte, error) {
	f := fileConfig{MTU: c.MTU, Seed: c.Seed, ReadyFile: c.ReadyFile, Links: []fileLink{}}
	for _, l := range c.Links {
		f.Links = append(f.Links, fileLink{
			Name: l.Name,
			A:    fileEndpoint(l.A),
			B:    fileEndpoint(l.B),
			AtoB: l.AtoB.Spec(),
			BtoA: l.BtoA.Spec(),
			MTU:  l.MTU,
			Veth: l.Veth,
		})
	}
	return json.Marshal(f)
}

// LoadConfig reads and validates a configuration file. Errors name the
// field; the Logger is left nil for the caller to set.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := parseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func parseConfig(b []byte) (Config, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileConfig
	if err := dec.Decode(&f); err != nil {
		return Config{}, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("unexpected data after the configuration object")
	}
	c := Config{MTU: f.MTU, Seed: f.Seed, ReadyFile: f.ReadyFile}
	var err error
	for i, fl := range f.Links {
		l := Link{Name: fl.Name, A: Endpoint(fl.A), B: Endpoint(fl.B), MTU: fl.MTU, Veth: fl.Veth}
		if l.AtoB, err = fl.AtoB.Params(); err != nil {
			return Config{}, fmt.Errorf("links[%d].a-to-b: %w", i, err)
		}
		if l.BtoA, err = fl.BtoA.Params(); err != nil {
			return Config{}, fmt.Errorf("links[%d].b-to-a: %w", i, err)
		}
		c.Links = append(c.Links, l)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// jsonError rewrites decoder errors so they name the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: cannot use a JSON %s here (want %s)", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s: want links, mtu, seed, ready-file; in a link name, a, b, a-to-b, b-to-a, mtu, veth; in an endpoint netns, device", msg)
	}
	return fmt.Errorf("parse JSON: %w", err)
}

func jsonKind(k string) string {
	switch k {
	case "slice":
		return "a list"
	case "struct":
		return "an object"
	case "int", "uint64":
		return "a whole number"
	}
	return "a " + k
}
