package freeport

import (
	"net"
	"testing"
)

// Every address is distinct and bindable, even though each listener used
// to find it is closed before the next call.
func TestAddrDistinctAndFree(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 500; i++ {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("call %d returned %s again", i, a)
		}
		seen[a] = true
	}
	a, _ := Addr()
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("bind %s: %v", a, err)
	}
	l.Close()
}
