package ring

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func BenchmarkLookup(b *testing.B) {
	tb := mustNew(b, randomMembers(rand.New(rand.NewPCG(1, 1)), 16), Options{})
	b.ReportAllocs()
	k := uint64(0)
	for b.Loop() {
		k++
		tb.Lookup(k)
	}
}

func BenchmarkLookupDown(b *testing.B) {
	tb := mustNew(b, randomMembers(rand.New(rand.NewPCG(1, 1)), 16), Options{})
	tb = tb.WithDown(map[string]bool{tb.members[3]: true})
	b.ReportAllocs()
	k := uint64(0)
	for b.Loop() {
		k++
		tb.LookupIndex(k)
	}
}

func BenchmarkKeyOf(b *testing.B) {
	src := netip.MustParseAddrPort("10.1.2.3:40000")
	dst := netip.MustParseAddrPort("10.9.8.7:443")
	b.ReportAllocs()
	for b.Loop() {
		src = netip.AddrPortFrom(src.Addr(), src.Port()+1)
		KeyOf(6, src, dst)
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 16, 64} {
		members := randomMembers(rand.New(rand.NewPCG(2, uint64(n))), n)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(members, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWithDown(b *testing.B) {
	for _, n := range []int{3, 16, 64} {
		tb := mustNew(b, randomMembers(rand.New(rand.NewPCG(3, uint64(n))), n), Options{})
		downs := []int{1, n / 2}
		if n/2 == 1 {
			downs[1] = n - 1 // N=3: one, and all but one
		}
		for _, d := range downs {
			down := map[string]bool{}
			for _, m := range tb.members[:d] {
				down[m] = true
			}
			b.Run(fmt.Sprintf("N=%d/down=%d", n, d), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					tb.WithDown(down)
				}
			})
		}
	}
}
