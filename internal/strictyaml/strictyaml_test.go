package strictyaml

import (
	"errors"
	"strings"
	"testing"
)

type config struct {
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     config
		err      error  // errors.Is
		text     string // or a substring of the error
	}{
		{name: "one document", in: "name: a\ncount: 2\n", want: config{"a", 2}},
		{name: "trailing separator", in: "name: a\n---\n", want: config{Name: "a"}},
		{name: "trailing null document", in: "name: a\n--- null\n", want: config{Name: "a"}},
		{name: "empty", in: "", err: ErrEmpty},
		{name: "only a comment", in: "# nothing yet\n", err: ErrEmpty},
		{name: "two documents", in: "name: a\n---\nname: b\n", err: ErrSeveral},
		{name: "bad second document", in: "name: a\n---\n[\n", err: ErrSeveral},
		{name: "unknown field", in: "name: a\ncolor: red\n", text: "field color not found"},
		{name: "wrong type", in: "count: many\n", text: "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got config
			err := Decode([]byte(tc.in), &got)
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("Decode(%q) = %v, want %v", tc.in, err, tc.err)
				}
			case tc.text != "":
				if err == nil || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("Decode(%q) = %v, want an error containing %q", tc.in, err, tc.text)
				}
			case err != nil:
				t.Fatalf("Decode(%q): %v", tc.in, err)
			case got != tc.want:
				t.Fatalf("Decode(%q) gave %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzDecode: any input gives a value or an error, never a panic, and
// input that decodes once decodes the same way again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"name: a\ncount: 2\n", "", "name: a\n---\n", "name: a\n---\nname: b\n", "[", "count: -1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var first, second config
		err := Decode(b, &first)
		if err2 := Decode(b, &second); (err == nil) != (err2 == nil) || first != second {
			t.Fatalf("Decode(%q) not repeatable: %v / %v, %+v / %+v", b, err, err2, first, second)
		}
	})
}
