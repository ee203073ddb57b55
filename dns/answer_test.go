package dns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

func mustAddrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// testImports is the catalog the handler and dig tests share.
func testImports(t testing.TB) *Static {
	t.Helper()
	var st Static
	err := st.Set(map[ImportKey]Import{
		{"test", "myservice"}: {
			Type: ClusterSetIP,
			IPs:  mustAddrs("10.42.42.42", "2001:db8::1"),
			Ports: []Port{
				{Name: "https", Protocol: "TCP", Port: 443},
				{Name: "dns", Protocol: "UDP", Port: 53},
				{Protocol: "TCP", Port: 8080}, // unnamed: no SRV
			},
		},
		{"test", "noip"}: {Type: ClusterSetIP, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}},
		{"test", "headless"}: {
			Type:  Headless,
			Ports: []Port{{Name: "https", Protocol: "TCP", Port: 443}},
			Endpoints: []Endpoint{
				{Hostname: "my-pet-1", Cluster: "clusterA", Addrs: mustAddrs("10.3.0.100")},
				{Hostname: "my-pet-2", Cluster: "clusterA", Addrs: mustAddrs("10.3.0.101", "2001:db8::2")},
				{Hostname: "my-pet-1", Cluster: "clusterB", Addrs: mustAddrs("10.4.0.100")},
				{Cluster: "clusterB", Addrs: mustAddrs("10.4.0.7")},
			},
		},
		{"test", "gone"}: {Type: Headless, Ports: []Port{{Name: "https", Protocol: "TCP", Port: 443}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &st
}

func testResponder(t testing.TB, imps Imports) *responder {
	t.Helper()
	cfg := Config{Imports: imps}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return newResponder(cfg.withDefaults())
}

// ask sends m through the handler as over UDP (or TCP) and decodes the answer.
func ask(t *testing.T, r *responder, m *mdns.Msg, udp bool) *mdns.Msg {
	t.Helper()
	req, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	out := r.respond(req, maxTCPMsg, udp)
	if out == nil {
		t.Fatal("no response")
	}
	resp := new(mdns.Msg)
	if err := resp.Unpack(out); err != nil {
		t.Fatalf("response does not unpack: %v", err)
	}
	if resp.Id != m.Id || !resp.Response {
		t.Fatalf("response id %d qr %v, want id %d qr true", resp.Id, resp.Response, m.Id)
	}
	return resp
}

// rrs renders records as "name ttl class type rdata", one string each.
func rrs(rs []mdns.RR) []string {
	var out []string
	for _, r := range rs {
		if r.Header().Rrtype == mdns.TypeOPT {
			continue
		}
		out = append(out, strings.Join(strings.Fields(r.String()), " "))
	}
	return out
}

const soa = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"

func TestAnswer(t *testing.T) {
	r := testResponder(t, testImports(t))
	const z = ".svc.clusterset.local."
	tests := []struct {
		name  string
		qname string
		qtype uint16
		class uint16 // default IN
		rcode int
		aa    bool
		ans   []string
		ns    []string
		extra []string
	}{
		{name: "A", qname: "myservice.test" + z, qtype: mdns.TypeA, aa: true,
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"}},
		{name: "AAAA", qname: "myservice.test" + z, qtype: mdns.TypeAAAA, aa: true,
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN AAAA 2001:db8::1"}},
		{name: "ANY", qname: "myservice.test" + z, qtype: mdns.TypeANY, aa: true,
			ans: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42", "myservice.test.svc.clusterset.local. 5 IN AAAA 2001:db8::1"}},
		{name: "0x20 case kept in owner", qname: "MyService.TeSt.SVC.ClusterSet.Local.", qtype: mdns.TypeA, aa: true,
			ans: []string{"MyService.TeSt.SVC.ClusterSet.Local. 5 IN A 10.42.42.42"}},
		{name: "SRV named port", qname: "_https._tcp.myservice.test" + z, qtype: mdns.TypeSRV, aa: true,
			ans:   []string{"_https._tcp.myservice.test.svc.clusterset.local. 5 IN SRV 10 100 443 myservice.test.svc.clusterset.local."},
			extra: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42", "myservice.test.svc.clusterset.local. 5 IN AAAA 2001:db8::1"}},
		{name: "SRV udp port", qname: "_dns._udp.myservice.test" + z, qtype: mdns.TypeSRV, aa: true,
			ans:   []string{"_dns._udp.myservice.test.svc.clusterset.local. 5 IN SRV 10 100 53 myservice.test.svc.clusterset.local."},
			extra: []string{"myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42", "myservice.test.svc.clusterset.local. 5 IN AAAA 2001:db8::1"}},
		{name: "SRV wrong protocol", qname: "_https._udp.myservice.test" + z, qtype: mdns.TypeSRV, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "SRV unknown port", qname: "_http._tcp.myservice.test" + z, qtype: mdns.TypeSRV, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "SRV unnamed port has none", qname: "_8080._tcp.myservice.test" + z, qtype: mdns.TypeSRV, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "A at SRV name is NODATA", qname: "_https._tcp.myservice.test" + z, qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "SRV at service name is NODATA", qname: "myservice.test" + z, qtype: mdns.TypeSRV, aa: true, ns: []string{soa}},
		{name: "MX is NODATA", qname: "myservice.test" + z, qtype: mdns.TypeMX, aa: true, ns: []string{soa}},
		{name: "proto node is empty non-terminal", qname: "_tcp.myservice.test" + z, qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "no cluster names for ClusterSetIP (2.3.4)", qname: "clusterA.myservice.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "ClusterSetIP without IP is NODATA", qname: "noip.test" + z, qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "dns-version", qname: "dns-version.clusterset.local.", qtype: mdns.TypeTXT, aa: true,
			ans: []string{`dns-version.clusterset.local. 5 IN TXT "1.0.0"`}},
		{name: "dns-version A is NODATA", qname: "dns-version.clusterset.local.", qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "unknown service", qname: "nope.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "known namespace", qname: "test" + z, qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "unknown namespace", qname: "other" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "svc node", qname: "svc.clusterset.local.", qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "apex SOA", qname: "clusterset.local.", qtype: mdns.TypeSOA, aa: true, ans: []string{soa}},
		{name: "apex A", qname: "clusterset.local.", qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "other name in zone", qname: "www.clusterset.local.", qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "too deep", qname: "a.b._https._tcp.myservice.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "escaped dot is not a separator", qname: `myservice\.test` + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "binary label", qname: `my\000service.test` + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "outside zone", qname: "example.com.", qtype: mdns.TypeA, rcode: mdns.RcodeRefused},
		{name: "zone suffix is not the zone", qname: "myservice.test.svc.notclusterset.local.", qtype: mdns.TypeA, rcode: mdns.RcodeRefused},
		{name: "root", qname: ".", qtype: mdns.TypeNS, rcode: mdns.RcodeRefused},
		{name: "class CH", qname: "dns-version.clusterset.local.", qtype: mdns.TypeTXT, class: mdns.ClassCHAOS, rcode: mdns.RcodeRefused},
		{name: "AXFR", qname: "clusterset.local.", qtype: mdns.TypeAXFR, rcode: mdns.RcodeRefused},
		{name: "OPT as qtype", qname: "clusterset.local.", qtype: mdns.TypeOPT, rcode: mdns.RcodeFormatError},

		// Headless (spec 2.4).
		{name: "headless A", qname: "headless.test" + z, qtype: mdns.TypeA, aa: true, ans: []string{
			"headless.test.svc.clusterset.local. 5 IN A 10.3.0.100",
			"headless.test.svc.clusterset.local. 5 IN A 10.3.0.101",
			"headless.test.svc.clusterset.local. 5 IN A 10.4.0.100",
			"headless.test.svc.clusterset.local. 5 IN A 10.4.0.7",
		}},
		{name: "headless AAAA", qname: "headless.test" + z, qtype: mdns.TypeAAAA, aa: true,
			ans: []string{"headless.test.svc.clusterset.local. 5 IN AAAA 2001:db8::2"}},
		{name: "headless endpoint A", qname: "my-pet-1.clusterA.headless.test" + z, qtype: mdns.TypeA, aa: true,
			ans: []string{"my-pet-1.clusterA.headless.test.svc.clusterset.local. 5 IN A 10.3.0.100"}},
		{name: "headless endpoint other cluster, any case", qname: "MY-PET-1.CLUSTERB.headless.test" + z, qtype: mdns.TypeA, aa: true,
			ans: []string{"MY-PET-1.CLUSTERB.headless.test.svc.clusterset.local. 5 IN A 10.4.0.100"}},
		{name: "headless endpoint AAAA", qname: "my-pet-2.clustera.headless.test" + z, qtype: mdns.TypeAAAA, aa: true,
			ans: []string{"my-pet-2.clustera.headless.test.svc.clusterset.local. 5 IN AAAA 2001:db8::2"}},
		{name: "headless endpoint without hostname", qname: "10-4-0-7.clusterB.headless.test" + z, qtype: mdns.TypeA, aa: true,
			ans: []string{"10-4-0-7.clusterB.headless.test.svc.clusterset.local. 5 IN A 10.4.0.7"}},
		{name: "headless endpoint without AAAA is NODATA", qname: "my-pet-1.clusterA.headless.test" + z, qtype: mdns.TypeAAAA, aa: true, ns: []string{soa}},
		{name: "headless cluster node is empty non-terminal", qname: "clusterA.headless.test" + z, qtype: mdns.TypeA, aa: true, ns: []string{soa}},
		{name: "headless unknown cluster", qname: "clusterC.headless.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "headless unknown host", qname: "my-pet-9.clusterA.headless.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{name: "headless SRV", qname: "_https._tcp.headless.test" + z, qtype: mdns.TypeSRV, aa: true, ans: []string{
			"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-1.clusterA.headless.test.svc.clusterset.local.",
			"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-2.clusterA.headless.test.svc.clusterset.local.",
			"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 my-pet-1.clusterB.headless.test.svc.clusterset.local.",
			"_https._tcp.headless.test.svc.clusterset.local. 5 IN SRV 10 100 443 10-4-0-7.clusterB.headless.test.svc.clusterset.local.",
		}, extra: []string{
			"my-pet-1.clusterA.headless.test.svc.clusterset.local. 5 IN A 10.3.0.100",
			"my-pet-2.clusterA.headless.test.svc.clusterset.local. 5 IN A 10.3.0.101",
			"my-pet-2.clusterA.headless.test.svc.clusterset.local. 5 IN AAAA 2001:db8::2",
			"my-pet-1.clusterB.headless.test.svc.clusterset.local. 5 IN A 10.4.0.100",
			"10-4-0-7.clusterB.headless.test.svc.clusterset.local. 5 IN A 10.4.0.7",
		}},
		{name: "headless without ready endpoints is NXDOMAIN (2.4.1)", qname: "gone.test" + z, qtype: mdns.TypeA, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
		// PTR (spec 2.3.3, 2.4.3).
		{name: "PTR clusterset IPv4", qname: "42.42.42.10.in-addr.arpa.", qtype: mdns.TypePTR, aa: true,
			ans: []string{"42.42.42.10.in-addr.arpa. 5 IN PTR myservice.test.svc.clusterset.local."}},
		{name: "PTR clusterset IPv6", qname: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.B.D.0.1.0.0.2.ip6.arpa.", qtype: mdns.TypePTR, aa: true,
			ans: []string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.B.D.0.1.0.0.2.ip6.arpa. 5 IN PTR myservice.test.svc.clusterset.local."}},
		{name: "PTR headless endpoint", qname: "100.0.3.10.in-addr.arpa.", qtype: mdns.TypePTR, aa: true,
			ans: []string{"100.0.3.10.in-addr.arpa. 5 IN PTR my-pet-1.clusterA.headless.test.svc.clusterset.local."}},
		{name: "PTR headless endpoint without hostname", qname: "7.0.4.10.in-addr.arpa.", qtype: mdns.TypePTR, aa: true,
			ans: []string{"7.0.4.10.in-addr.arpa. 5 IN PTR 10-4-0-7.clusterB.headless.test.svc.clusterset.local."}},
		{name: "A at a PTR name is NODATA", qname: "42.42.42.10.in-addr.arpa.", qtype: mdns.TypeA, aa: true},
		{name: "PTR unknown address", qname: "1.1.1.1.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeRefused},
		{name: "PTR partial name", qname: "42.10.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeRefused},
		{name: "PTR leading zero", qname: "042.42.42.10.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeRefused},
		{name: "headless without ready endpoints has no SRV", qname: "_https._tcp.gone.test" + z, qtype: mdns.TypeSRV, aa: true, rcode: mdns.RcodeNameError, ns: []string{soa}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(mdns.Msg)
			m.SetQuestion(tt.qname, tt.qtype)
			if tt.class != 0 {
				m.Question[0].Qclass = tt.class
			}
			resp := ask(t, r, m, true)
			if resp.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", mdns.RcodeToString[resp.Rcode], mdns.RcodeToString[tt.rcode])
			}
			if resp.Authoritative != tt.aa {
				t.Errorf("aa %v, want %v", resp.Authoritative, tt.aa)
			}
			if !resp.RecursionDesired || resp.RecursionAvailable || resp.Truncated {
				t.Errorf("flags rd %v ra %v tc %v, want rd only", resp.RecursionDesired, resp.RecursionAvailable, resp.Truncated)
			}
			if len(resp.Question) != 1 || resp.Question[0] != m.Question[0] {
				t.Errorf("question %v, want %v", resp.Question, m.Question)
			}
			check := func(section string, got, want []string) {
				if !slices.Equal(got, want) {
					t.Errorf("%s:\n got %q\nwant %q", section, got, want)
				}
			}
			check("answer", rrs(resp.Answer), tt.ans)
			check("authority", rrs(resp.Ns), tt.ns)
			check("additional", rrs(resp.Extra), tt.extra)
		})
	}
}

func TestLookupOnly(t *testing.T) {
	r := testResponder(t, lookupOnly{testImports(t)})
	// An Imports without HasNamespace cannot say a namespace is empty, so
	// every namespace is an empty non-terminal rather than NXDOMAIN.
	m := new(mdns.Msg)
	m.SetQuestion("other.svc.clusterset.local.", mdns.TypeA)
	if resp := ask(t, r, m, true); resp.Rcode != mdns.RcodeSuccess || len(resp.Answer) != 0 {
		t.Fatalf("namespace: got %s with %d answers, want NOERROR and none", mdns.RcodeToString[resp.Rcode], len(resp.Answer))
	}
	// Without LookupAddr there are no PTR records.
	m.SetQuestion("42.42.42.10.in-addr.arpa.", mdns.TypePTR)
	if resp := ask(t, r, m, true); resp.Rcode != mdns.RcodeRefused {
		t.Fatalf("PTR: got %s, want REFUSED", mdns.RcodeToString[resp.Rcode])
	}
}

type lookupOnly struct{ Imports }

// raw builds a query message by hand for what miekg/dns would not pack.
func raw(id, flags uint16, qd, an, ns, ar uint16, body ...byte) []byte {
	b := []byte{byte(id >> 8), byte(id), byte(flags >> 8), byte(flags), byte(qd >> 8), byte(qd), byte(an >> 8), byte(an), byte(ns >> 8), byte(ns), byte(ar >> 8), byte(ar)}
	return append(b, body...)
}

// qA is the wire question "myservice.test.svc.clusterset.local. IN A".
var qA = func() []byte {
	m := new(mdns.Msg)
	m.SetQuestion("myservice.test.svc.clusterset.local.", mdns.TypeA)
	b, _ := m.Pack()
	return b[12:]
}()

func TestMalformed(t *testing.T) {
	r := testResponder(t, testImports(t))
	twoQ := append(append([]byte{}, qA...), qA...)
	tests := []struct {
		name   string
		req    []byte
		drop   bool
		rcode  int
		opcode int
		nq     int
	}{
		{name: "short", req: []byte{1, 2, 3}, drop: true},
		{name: "empty", req: nil, drop: true},
		{name: "response", req: raw(7, flagQR, 1, 0, 0, 0, qA...), drop: true},
		{name: "no question", req: raw(7, flagRD, 0, 0, 0, 0), rcode: mdns.RcodeFormatError},
		{name: "two questions", req: raw(7, flagRD, 2, 0, 0, 0, twoQ...), rcode: mdns.RcodeFormatError},
		{name: "count beyond body", req: raw(7, flagRD, 1, 1, 0, 0, qA...), rcode: mdns.RcodeFormatError},
		{name: "garbage body", req: raw(7, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff), rcode: mdns.RcodeFormatError},
		{name: "compression loop", req: raw(7, 0, 1, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1), rcode: mdns.RcodeFormatError},
		{name: "notify", req: raw(7, mdns.OpcodeNotify<<opShift, 1, 0, 0, 0, qA...), rcode: mdns.RcodeNotImplemented, opcode: mdns.OpcodeNotify},
		{name: "update", req: raw(7, mdns.OpcodeUpdate<<opShift, 1, 0, 0, 0, qA...), rcode: mdns.RcodeNotImplemented, opcode: mdns.OpcodeUpdate},
		{name: "opcode 15", req: raw(7, 15<<opShift, 0, 0, 0, 0), rcode: mdns.RcodeNotImplemented, opcode: 15},
		{name: "trailing bytes ok", req: raw(7, 0, 1, 0, 0, 0, append(append([]byte{}, qA...), 1, 2, 3)...), rcode: mdns.RcodeSuccess, nq: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := r.respond(tt.req, maxTCPMsg, true)
			if tt.drop {
				if out != nil {
					t.Fatalf("answered %x, want no answer", out)
				}
				return
			}
			resp := new(mdns.Msg)
			if err := resp.Unpack(out); err != nil {
				t.Fatalf("response does not unpack: %v", err)
			}
			if resp.Id != 7 || !resp.Response || resp.Rcode != tt.rcode || resp.Opcode != tt.opcode || len(resp.Question) != tt.nq {
				t.Fatalf("got id %d qr %v rcode %s opcode %d questions %d, want id 7 qr true rcode %s opcode %d questions %d",
					resp.Id, resp.Response, mdns.RcodeToString[resp.Rcode], resp.Opcode, len(resp.Question),
					mdns.RcodeToString[tt.rcode], tt.opcode, tt.nq)
			}
		})
	}
}

func TestEDNS(t *testing.T) {
	r := testResponder(t, testImports(t))
	q := func(size uint16, version uint8, do bool) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion("myservice.test.svc.clusterset.local.", mdns.TypeA)
		m.SetEdns0(size, do)
		m.IsEdns0().SetVersion(version)
		return m
	}
	resp := ask(t, r, q(4096, 0, true), true)
	opt := resp.IsEdns0()
	if opt == nil || opt.UDPSize() != defaultUDPSize || opt.Do() || opt.Version() != 0 || len(resp.Answer) != 1 {
		t.Fatalf("got %v, want an answer with OPT size %d, DO clear", resp, defaultUDPSize)
	}
	resp = ask(t, r, q(4096, 1, false), true)
	if resp.Rcode != mdns.RcodeBadVers || resp.IsEdns0() == nil || len(resp.Answer) != 0 {
		t.Fatalf("got %v, want BADVERS with OPT", resp)
	}

	// Two OPT records are a format error (RFC 6891 6.1.1).
	m := q(1232, 0, false)
	m.Extra = append(m.Extra, m.Extra[0])
	if resp := ask(t, r, m, true); resp.Rcode != mdns.RcodeFormatError {
		t.Fatalf("two OPTs: got %s, want FORMERR", mdns.RcodeToString[resp.Rcode])
	}
}

// bigImports holds a headless service with n endpoints in one cluster.
func bigImports(t testing.TB, n int) *Static {
	var eps []Endpoint
	for i := range n {
		eps = append(eps, Endpoint{Hostname: fmt.Sprintf("ep-%d", i), Cluster: "c1", Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}})
	}
	var st Static
	if err := st.Put("test", "big", Import{Type: Headless, Endpoints: eps, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}}); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestTruncation(t *testing.T) {
	r := testResponder(t, bigImports(t, 300))
	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		edns    uint16 // 0: no OPT
		udp     bool
		maxLen  int
		tc      bool
		answers int // -1: fewer than all, but some
		extra   int // -1: any
	}{
		{name: "udp 512", qname: "big.test.svc.clusterset.local.", qtype: mdns.TypeA, udp: true, maxLen: 512, tc: true, answers: -1},
		{name: "udp edns 4096 capped at 1232", qname: "big.test.svc.clusterset.local.", qtype: mdns.TypeA, edns: 4096, udp: true, maxLen: 1232, tc: true, answers: -1},
		{name: "udp edns 700", qname: "big.test.svc.clusterset.local.", qtype: mdns.TypeA, edns: 700, udp: true, maxLen: 700, tc: true, answers: -1},
		{name: "tcp all", qname: "big.test.svc.clusterset.local.", qtype: mdns.TypeA, udp: false, maxLen: maxTCPMsg, answers: 300},
		{name: "tcp SRV with additional", qname: "_http._tcp.big.test.svc.clusterset.local.", qtype: mdns.TypeSRV, udp: false, maxLen: maxTCPMsg, answers: 300, extra: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(mdns.Msg)
			m.SetQuestion(tt.qname, tt.qtype)
			if tt.edns > 0 {
				m.SetEdns0(tt.edns, false)
			}
			req, _ := m.Pack()
			out := r.respond(req, maxTCPMsg, tt.udp)
			if len(out) > tt.maxLen {
				t.Errorf("response %d octets, limit %d", len(out), tt.maxLen)
			}
			resp := new(mdns.Msg)
			if err := resp.Unpack(out); err != nil {
				t.Fatal(err)
			}
			if resp.Truncated != tt.tc {
				t.Errorf("tc %v, want %v", resp.Truncated, tt.tc)
			}
			if tt.answers >= 0 && len(resp.Answer) != tt.answers || tt.answers < 0 && (len(resp.Answer) == 0 || len(resp.Answer) >= 300) {
				t.Errorf("%d answers, want %d (-1: some)", len(resp.Answer), tt.answers)
			}
			if got := len(rrs(resp.Extra)); tt.extra >= 0 && got != tt.extra {
				t.Errorf("%d additional, want %d", got, tt.extra)
			}
			if (tt.edns > 0) != (resp.IsEdns0() != nil) {
				t.Errorf("OPT in response %v, want %v", resp.IsEdns0() != nil, tt.edns > 0)
			}
		})
	}

	// Answers that fit without the (optional) additional section lose it
	// without TC: 18 SRV fit in 1232 octets (about 57 each: SRV targets are
	// not compressed), with their 18 A records they do not.
	r = testResponder(t, bigImports(t, 18))
	m := new(mdns.Msg)
	m.SetQuestion("_http._tcp.big.test.svc.clusterset.local.", mdns.TypeSRV)
	m.SetEdns0(1232, false)
	resp := ask(t, r, m, true)
	if resp.Truncated || len(resp.Answer) != 18 || len(rrs(resp.Extra)) != 0 {
		t.Fatalf("tc %v, %d answers, %d additional; want no TC, 18, 0", resp.Truncated, len(resp.Answer), len(rrs(resp.Extra)))
	}
}

func TestStats(t *testing.T) {
	r := testResponder(t, testImports(t))
	for _, q := range []struct {
		name string
		t    uint16
	}{
		{"myservice.test.svc.clusterset.local.", mdns.TypeA},
		{"nope.test.svc.clusterset.local.", mdns.TypeA},
		{"_https._tcp.myservice.test.svc.clusterset.local.", mdns.TypeSRV},
		{"example.org.", mdns.TypeMX},
	} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.t)
		ask(t, r, m, true)
	}
	r.respond([]byte{1}, maxTCPMsg, true)
	r.respond(raw(1, 0, 0, 0, 0, 0), maxTCPMsg, true)
	s := r.stats.snapshot()
	want := Stats{
		Responses: 5,
		ByType:    map[string]uint64{"A": 2, "SRV": 1, "other": 1, "none": 1},
		ByRcode:   map[string]uint64{"NOERROR": 2, "NXDOMAIN": 1, "REFUSED": 1, "FORMERR": 1},
		Dropped:   1,
	}
	for k, v := range s.ByType {
		if v != want.ByType[k] {
			t.Errorf("ByType[%s] = %d, want %d", k, v, want.ByType[k])
		}
	}
	for k, v := range s.ByRcode {
		if v != want.ByRcode[k] {
			t.Errorf("ByRcode[%s] = %d, want %d", k, v, want.ByRcode[k])
		}
	}
	if s.Responses != want.Responses || s.Dropped != want.Dropped {
		t.Errorf("responses %d dropped %d, want %d %d", s.Responses, s.Dropped, want.Responses, want.Dropped)
	}
}

func BenchmarkAnswerA(b *testing.B) {
	r := testResponder(b, testImports(b))
	m := new(mdns.Msg)
	m.SetQuestion("myservice.test.svc.clusterset.local.", mdns.TypeA)
	m.SetEdns0(1232, false)
	req, _ := m.Pack()
	b.ReportAllocs()
	for b.Loop() {
		if r.respond(req, maxTCPMsg, true) == nil {
			b.Fatal("no answer")
		}
	}
}
