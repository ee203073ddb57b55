package dns

import (
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// FuzzRespond feeds raw datagrams to the whole message path (parse, answer,
// fit, pack): it must never panic and must answer with nothing or a
// well-formed response to the same ID that fits the transport.
func FuzzRespond(f *testing.F) {
	for _, q := range []struct {
		name string
		t    uint16
		edns uint16
	}{
		{"myservice.test.svc.clusterset.local.", mdns.TypeA, 0},
		{"MyService.Test.svc.clusterset.local.", mdns.TypeAAAA, 1232},
		{"_https._tcp.myservice.test.svc.clusterset.local.", mdns.TypeSRV, 4096},
		{"_https._tcp.headless.test.svc.clusterset.local.", mdns.TypeSRV, 0},
		{"my-pet-1.clusterA.headless.test.svc.clusterset.local.", mdns.TypeA, 0},
		{"_http._tcp.big.test.svc.clusterset.local.", mdns.TypeSRV, 600},
		{"big.test.svc.clusterset.local.", mdns.TypeANY, 0},
		{"dns-version.clusterset.local.", mdns.TypeTXT, 0},
		{"clusterset.local.", mdns.TypeSOA, 0},
		{"nope.test.svc.clusterset.local.", mdns.TypeA, 0},
		{"example.com.", mdns.TypeA, 0},
		{`a\.b.test.svc.clusterset.local.`, mdns.TypeA, 0},
		{"42.42.42.10.in-addr.arpa.", mdns.TypePTR, 0},
		{"7.0.4.10.in-addr.arpa.", mdns.TypePTR, 1232},
	} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.t)
		if q.edns > 0 {
			m.SetEdns0(q.edns, true)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
		f.Add(b, false)
	}
	f.Add(raw(1, mdns.OpcodeUpdate<<opShift, 1, 0, 0, 0, qA...), true)
	f.Add(raw(1, 0, 2, 0, 0, 0, append(append([]byte{}, qA...), qA...)...), true)
	f.Add(raw(1, 0, 1, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1), false)
	f.Add([]byte{0, 1}, true)
	// Edges: nothing, a header cut short, counts at their maximum with
	// no records, a question cut short, a label of invalid UTF-8.
	f.Add([]byte{}, true)
	f.Add(raw(1, 0, 1, 0, 0, 0)[:7], false)
	f.Add(raw(1, 0, 0xffff, 0xffff, 0xffff, 0xffff), true)
	f.Add(raw(1, 0, 1, 0, 0, 0, qA[:len(qA)-3]...), false)
	f.Add(raw(1, 0, 1, 0, 0, 0, 2, 0xff, 0xfe, 4, 't', 'e', 's', 't', 3, 's', 'v', 'c', 10, 'c', 'l', 'u', 's', 't', 'e', 'r', 's', 'e', 't', 5, 'l', 'o', 'c', 'a', 'l', 0, 0, 1, 0, 1), true)

	// The fuzz catalog includes a large headless service so that
	// truncation runs too.
	st := testImports(f)
	big, _ := bigImports(f, 120).LookupImport("test", "big")
	if err := st.Put("test", "big", big); err != nil {
		f.Fatal(err)
	}
	r := testResponder(f, st)
	f.Fuzz(func(t *testing.T, req []byte, udp bool) {
		out := r.respond(req, maxTCPMsg, udp)
		if out == nil {
			if len(req) >= hdrLen && req[2]&0x80 == 0 {
				t.Fatalf("query %x got no answer", req)
			}
			return
		}
		limit := maxTCPMsg
		if udp {
			limit = defaultUDPSize
		}
		if len(out) > limit {
			t.Fatalf("response of %d octets over limit %d", len(out), limit)
		}
		resp := new(mdns.Msg)
		if err := resp.Unpack(out); err != nil {
			t.Fatalf("response does not unpack: %v\nreq %x\nresp %x", err, req, out)
		}
		if !resp.Response || resp.Id != uint16(req[0])<<8|uint16(req[1]) || len(resp.Question) > 1 {
			t.Fatalf("bad response header: %v", resp.MsgHdr)
		}
		if udp && !resp.Truncated && resp.IsEdns0() == nil && len(out) > mdns.MinMsgSize {
			t.Fatalf("UDP response without EDNS0 is %d octets", len(out))
		}
	})
}

// FuzzSplitName checks the presentation-format name parser: no panics,
// labels within DNS limits, and re-escaping round-trips.
func FuzzSplitName(f *testing.F) {
	for _, s := range []string{
		".", "", "a", "a.", "clusterset.local.", `a\.b.c.`, `\065\066.c`, `a\`, `a\1`, `a\256.`,
		"a..b", strings.Repeat("a", 64) + ".", strings.Repeat("abc.", 70), `\\.\"`,
		"42.42.42.10.in-addr.arpa.", "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
		"256.1.1.1.in-addr.arpa.", "01.1.1.1.in-addr.arpa", "g.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
		// Edges: invalid UTF-8, escapes past a byte, an octet past 255 and
		// a negative one in a reverse name.
		"\xff\xfe.c.", "a\xc3.test.svc.clusterset.local.", `\999.`, `\-1.`, "99999999999.1.1.1.in-addr.arpa.", "-1.1.1.1.in-addr.arpa.",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		labels, err := splitName(s)
		if err != nil {
			return
		}
		wire := 1
		var b strings.Builder
		for _, l := range labels {
			if len(l) == 0 || len(l) > 63 {
				t.Fatalf("label %q of %q: length %d", l, s, len(l))
			}
			if l != asciiLower(l) {
				t.Fatalf("label %q not lowercased", l)
			}
			wire += 1 + len(l)
			for i := 0; i < len(l); i++ {
				c := l[i]
				b.WriteString(`\`)
				b.WriteString(string(rune('0' + c/100)))
				b.WriteString(string(rune('0' + c/10%10)))
				b.WriteString(string(rune('0' + c%10)))
			}
			b.WriteByte('.')
		}
		if wire > 255 {
			t.Fatalf("%q: wire length %d", s, wire)
		}
		again, err := splitName(b.String())
		if err != nil || !slices.Equal(again, labels) {
			t.Fatalf("round trip of %q via %q: %q, %v; want %q", s, b.String(), again, err, labels)
		}
		// A parsed reverse name is exactly the canonical reverse name of
		// its address.
		if addr, _, ok := reverseAddr(labels); ok {
			rev, err := mdns.ReverseAddr(addr.String())
			if err != nil {
				t.Fatalf("%q parsed to %v, which has no reverse name: %v", s, addr, err)
			}
			if want, _ := splitName(rev); !slices.Equal(want, labels) {
				t.Fatalf("%q parsed to %v, whose reverse name is %q", s, addr, rev)
			}
		}
		// Whatever miekg/dns accepts as a name we must accept too, since
		// it hands us such names from the wire.
		if _, ok := mdns.IsDomainName(s); !ok {
			return
		}
		if _, err := mdns.PackDomainName(mdns.Fqdn(s), make([]byte, 256), 0, nil, false); err == nil {
			if _, err := splitName(mdns.Fqdn(s)); err != nil {
				t.Fatalf("miekg packs %q but splitName says %v", s, err)
			}
		}
	})
}

func asciiLower(s string) string {
	b := []byte(s)
	for i := range b {
		b[i] = lower(b[i])
	}
	return string(b)
}
