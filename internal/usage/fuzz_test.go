package usage

import "testing"

// FuzzParse: the /proc parsers never panic and never return a value with
// an error.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"1 (a) S 0 1 1 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 100 10",
		"42 (x) y (z)) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 5 100 10",
		"", ")", "(", "1 ()",
		"1 (a) S 0 1 1 0 -1 0 0 0 0 0 18446744073709551615 18446744073709551615 0 0 20",
		"1 (a) S 0 1 1 0 -1 0 0 0 0 0 4611686018427387904 4611686018427387904 0 0 20",
		"VmHWM:\t 1500 kB\n", "VmHWM: 99999999999999999999 kB", "VmHWM:", "VmHWM: \xff kB",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseStat(b); err != nil && v != 0 {
			t.Fatalf("ParseStat = %d with error %v", v, err)
		}
		if v, err := ParseStatus(b, "VmHWM"); err != nil && v != 0 || err == nil && v < 0 {
			t.Fatalf("ParseStatus = %d, %v", v, err)
		}
	})
}
