package kube

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

func TestParsePeerLog(t *testing.T) {
	out := "strait app peer listening on [::]:18084\n" +
		"peer 10.200.128.2 \"/1\"\n" +
		"peer 10.200.128.2 \"/1\"\n" + // a second request: one address
		"peer ::ffff:10.0.0.7 \"/0\"\n" + // a v4 address on a v6 socket
		"peer fd00::1 \"/0\"\n" +
		"peer not-an-address \"/0\"\n" +
		"peer 10.0.0.9 /unquoted\n" +
		"peer 10.0.0.9\n" +
		"garbage\n"
	want := map[string][]netip.Addr{
		"/0": {netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::1")},
		"/1": {netip.MustParseAddr("10.200.128.2")},
	}
	if got := parsePeerLog([]byte(out)); !reflect.DeepEqual(got, want) {
		t.Errorf("parsePeerLog = %v, want %v", got, want)
	}
}

// FuzzParsePeerLog: any log parses without panicking, and yields per path
// distinct, valid addresses without zone or IPv4-in-IPv6 form (they become
// /32 and /128 prefixes of the emulation's Remote).
func FuzzParsePeerLog(f *testing.F) {
	f.Add([]byte("peer 10.0.0.1 \"/0\"\npeer fd00::1%eth0 \"/1\"\n"))
	f.Add([]byte("strait app peer listening on 0.0.0.0:18084\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for path, addrs := range parsePeerLog(b) {
			if len(addrs) == 0 {
				t.Fatalf("path %q with no address", path)
			}
			for i, a := range addrs {
				if !a.IsValid() || a.Zone() != "" || a.Is4In6() || slices.Contains(addrs[:i], a) {
					t.Fatalf("path %q: address %v of %v from %q", path, a, addrs, b)
				}
			}
		}
	})
}
