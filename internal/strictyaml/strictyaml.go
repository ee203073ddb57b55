// Package strictyaml reads a file that holds one YAML document, as strait
// reads its configuration, topology, experiment and clusters files: a field
// the target does not have is an error, and so are an empty file and a
// second document, which would otherwise be ignored with whatever the user
// meant to say in it.
package strictyaml

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

var (
	// ErrEmpty is Decode's error for input with no document, or only
	// comments. Callers wrap it with what the file should hold.
	ErrEmpty = errors.New("empty: want a YAML mapping")
	// ErrSeveral is Decode's error for a second document that holds
	// anything: a trailing `---` alone is allowed.
	ErrSeveral = errors.New("more than one YAML document: the file holds one")
)

// Decode decodes the one YAML document in b into v, with unknown fields
// as errors.
func Decode(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return ErrEmpty
		}
		return err
	}
	for {
		var rest yaml.Node
		err := dec.Decode(&rest)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil || !empty(&rest) {
			return ErrSeveral
		}
	}
}

// empty reports whether n is a document with nothing in it, as a trailing
// `---` or a `--- null` makes.
func empty(n *yaml.Node) bool {
	if n.Kind == 0 || (n.Kind == yaml.DocumentNode && len(n.Content) == 0) {
		return true
	}
	return n.Kind == yaml.DocumentNode && n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null"
}
