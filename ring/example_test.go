package ring_test

import (
	"fmt"
	"net/netip"

	"github.com/strait-net/strait/ring"
)

func Example() {
	table, err := ring.New([]string{"gw-1", "gw-2", "gw-3"}, ring.Options{})
	if err != nil {
		panic(err)
	}
	flow := ring.KeyOf(6, netip.MustParseAddrPort("10.1.2.3:40000"), netip.MustParseAddrPort("10.9.8.7:443"))
	gw, _ := table.Lookup(flow)

	// The prober declares the gateway dead: only its flows move.
	failed := table.WithDown(map[string]bool{gw: true})
	other, _ := failed.Lookup(flow)
	// It recovers: its flows come back.
	back, _ := failed.WithDown(nil).Lookup(flow)

	fmt.Println(gw != other, back == gw, table.Buckets("gw-1")+table.Buckets("gw-2")+table.Buckets("gw-3"))
	// Output: true true 65537
}
