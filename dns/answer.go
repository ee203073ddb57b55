package dns

import (
	"encoding/binary"
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"
)

// Fixed parts of the records. Priority and weight are not prescribed by the
// spec (2.3.2, 2.4.2); these are the values of its examples, the same for
// every target so that clients spread load evenly.
const (
	srvPriority = 10
	srvWeight   = 100
)

// SpecVersion is the MCS DNS schema version served as TXT at
// dns-version.<zone> (spec 2.2).
const SpecVersion = "1.0.0"

// responder turns one request message into one response message. It holds
// no per-request state and is safe for concurrent use.
type responder struct {
	zone       string   // canonical, fully qualified: "clusterset.local."
	zoneLabels []string // lowercase raw labels of zone
	ttl        uint32
	udpSize    uint16 // EDNS0 payload size we advertise and cap UDP answers at
	imports    Imports
	namespaces NamespaceLister // nil if imports does not implement it
	addrs      AddrLookup      // nil if imports does not implement it
	soa        *mdns.SOA
	stats      counters
}

func newResponder(cfg Config) *responder {
	zone := mdns.CanonicalName(cfg.Zone)
	labels, _ := splitName(zone) // Validate checked it
	ttl := uint32(cfg.TTL.Seconds())
	r := &responder{
		zone:       zone,
		zoneLabels: labels,
		ttl:        ttl,
		udpSize:    cfg.UDPSize,
		imports:    cfg.Imports,
		soa: &mdns.SOA{
			Hdr:  mdns.RR_Header{Name: zone, Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: ttl},
			Ns:   "ns.dns." + zone,
			Mbox: "hostmaster." + zone,
			// The zone is synthesized and never transferred, so the serial
			// only has to be valid.
			Serial:  1,
			Refresh: 7200,
			Retry:   1800,
			Expire:  86400,
			Minttl:  ttl, // negative answers are cached for TTL (RFC 2308)
		},
	}
	if r.imports == nil {
		r.imports = (*Static)(nil)
	}
	if nl, ok := r.imports.(NamespaceLister); ok {
		r.namespaces = nl
	}
	if al, ok := r.imports.(AddrLookup); ok {
		r.addrs = al
	}
	return r
}

const (
	hdrLen  = 12
	flagQR  = 1 << 15
	flagRD  = 1 << 8
	opShift = 11
)

// respond answers the wire message req with a wire message of at most
// maxSize octets (maxSize is the transport's limit: 65535 for TCP, the
// datagram limit for UDP before EDNS0 is considered). It returns nil when the
// message must not be answered: shorter than a header, or itself a response.
func (r *responder) respond(req []byte, maxSize int, udp bool) []byte {
	if len(req) < hdrLen {
		r.stats.dropped.Add(1)
		return nil
	}
	id := binary.BigEndian.Uint16(req[0:])
	flags := binary.BigEndian.Uint16(req[2:])
	if flags&flagQR != 0 {
		// Answering responses invites loops and reflection.
		r.stats.dropped.Add(1)
		return nil
	}
	opcode := int(flags>>opShift) & 0xF

	q := new(mdns.Msg)
	parseErr := q.Unpack(req)

	m := new(mdns.Msg)
	m.Id = id
	m.Response = true
	m.Opcode = opcode
	m.RecursionDesired = flags&flagRD != 0

	switch {
	case opcode != mdns.OpcodeQuery:
		return r.finish(m, nil, mdns.RcodeNotImplemented, -1, maxSize)
	case parseErr != nil, !countsMatch(req, q), len(q.Question) != 1:
		return r.finish(m, nil, mdns.RcodeFormatError, -1, maxSize)
	}
	m.Question = q.Question[:1]
	m.CheckingDisabled = q.CheckingDisabled
	qt := int(q.Question[0].Qtype)

	// EDNS0 (RFC 6891): at most one OPT, owned by the root; answer with our
	// own OPT, and BADVERS for versions we do not speak.
	var opt *mdns.OPT
	for _, rr := range q.Extra {
		if o, ok := rr.(*mdns.OPT); ok {
			if opt != nil || o.Hdr.Name != "." {
				return r.finish(m, nil, mdns.RcodeFormatError, qt, maxSize)
			}
			opt = o
		}
	}
	limit := maxSize
	if opt != nil {
		if udp {
			limit = min(max(int(opt.UDPSize()), mdns.MinMsgSize), int(r.udpSize), maxSize)
		}
		if opt.Version() != 0 {
			return r.finish(m, opt, mdns.RcodeBadVers, qt, limit)
		}
	} else if udp {
		limit = min(mdns.MinMsgSize, maxSize)
	}

	rcode := r.answer(m, &q.Question[0])
	return r.finish(m, opt, rcode, qt, limit)
}

// countsMatch reports whether the message held as many records as its
// header announced; miekg/dns silently stops at the end of the data.
func countsMatch(req []byte, q *mdns.Msg) bool {
	n := func(i int) int { return int(binary.BigEndian.Uint16(req[i:])) }
	return n(4) == len(q.Question) && n(6) == len(q.Answer) && n(8) == len(q.Ns) && n(10) == len(q.Extra)
}

// finish counts, fits and packs the response.
func (r *responder) finish(m *mdns.Msg, reqOpt *mdns.OPT, rcode int, qt int, limit int) []byte {
	m.Rcode = rcode
	if reqOpt != nil {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(r.udpSize)
		m.Extra = append(m.Extra, o)
	}
	m.Compress = true
	if limit < mdns.MinMsgSize {
		limit = mdns.MinMsgSize
	}
	if m.Len() > limit {
		// The additional section is optional (spec 2.3.2, 2.4.2): drop it
		// first and only set TC when answers must go.
		if reqOpt != nil {
			m.Extra = m.Extra[len(m.Extra)-1:]
		} else {
			m.Extra = nil
		}
		if m.Len() > limit {
			m.Truncate(limit)
			m.Compress = true
			r.stats.truncated.Add(1)
		}
	}
	out, err := m.Pack()
	if err != nil {
		// Only records built from data that got past validation can fail to
		// pack; say so rather than send nothing.
		m.Answer, m.Ns = nil, nil
		if reqOpt != nil {
			m.Extra = m.Extra[len(m.Extra)-1:]
		} else {
			m.Extra = nil
		}
		m.Rcode = mdns.RcodeServerFailure
		m.Truncated = false
		if out, err = m.Pack(); err != nil {
			r.stats.dropped.Add(1)
			return nil
		}
	}
	r.stats.count(qt, m.Rcode)
	return out
}

// answer fills m's sections for question q and returns the rcode.
func (r *responder) answer(m *mdns.Msg, q *mdns.Question) int {
	switch q.Qtype {
	case mdns.TypeOPT, mdns.TypeTSIG, mdns.TypeTKEY:
		return mdns.RcodeFormatError // meta types are not questions
	case mdns.TypeAXFR, mdns.TypeIXFR:
		return mdns.RcodeRefused // the zone is synthesized, not transferable
	}
	if q.Qclass != mdns.ClassINET {
		return mdns.RcodeRefused
	}
	labels, err := splitName(q.Name)
	if err != nil {
		return mdns.RcodeFormatError
	}
	rel, ok := relLabels(labels, r.zoneLabels)
	if !ok {
		return r.reverse(m, q, labels)
	}
	m.Authoritative = true
	a := answerer{r: r, m: m, q: q}
	switch a.lookup(rel) {
	case found:
		return mdns.RcodeSuccess
	case empty:
		m.Ns = append(m.Ns, r.soa)
		return mdns.RcodeSuccess
	default:
		m.Ns = append(m.Ns, r.soa)
		return mdns.RcodeNameError
	}
}

// reverse answers PTR questions (spec 2.3.3, 2.4.3) for the addresses the
// imports know. Everything else outside the zone, including addresses we do
// not know, is REFUSED: we are not authoritative for the reverse trees, only
// for some names in them, so a forwarder can try its next server.
func (r *responder) reverse(m *mdns.Msg, q *mdns.Question, labels []string) int {
	if r.addrs == nil {
		return mdns.RcodeRefused
	}
	addr, _, ok := reverseAddr(labels)
	if !ok {
		return mdns.RcodeRefused
	}
	o, ok := r.addrs.LookupAddr(addr)
	if !ok || !isLabel(o.Namespace) || !isLabel(o.Name) {
		return mdns.RcodeRefused
	}
	target := o.Name + "." + o.Namespace + ".svc." + r.zone
	if o.Cluster != "" || o.Hostname != "" {
		if !isLabel(o.Cluster) || !isLabel(o.Hostname) {
			return mdns.RcodeRefused
		}
		target = o.Hostname + "." + o.Cluster + "." + target
	}
	m.Authoritative = true
	if q.Qtype == mdns.TypePTR || q.Qtype == mdns.TypeANY {
		m.Answer = append(m.Answer, &mdns.PTR{
			Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypePTR, Class: mdns.ClassINET, Ttl: r.ttl},
			Ptr: target,
		})
	}
	return mdns.RcodeSuccess
}

type result uint8

const (
	nxdomain result = iota // no such name
	empty                  // the name exists but has no records of the type (NODATA)
	found                  // answers added
)

type answerer struct {
	r *responder
	m *mdns.Msg
	q *mdns.Question
}

func (a *answerer) want(t uint16) bool {
	return a.q.Qtype == t || a.q.Qtype == mdns.TypeANY
}

// done reports found if answers were added, else empty.
func (a *answerer) done() result {
	if len(a.m.Answer) > 0 {
		return found
	}
	return empty
}

func (a *answerer) hdr(name string, t uint16) mdns.RR_Header {
	return mdns.RR_Header{Name: name, Rrtype: t, Class: mdns.ClassINET, Ttl: a.r.ttl}
}

// lookup resolves the labels below the zone, rel[0] being the label just
// under the apex:
//
//	[]                                  apex: SOA
//	[dns-version]                       TXT "1.0.0" (spec 2.2)
//	[svc]                               empty non-terminal
//	[svc ns]                            empty non-terminal if ns has imports
//	[svc ns name]                       A/AAAA (spec 2.3.1, 2.4.1)
//	[svc ns name _proto]                empty non-terminal if a named port uses proto
//	[svc ns name clusterid]             headless: empty non-terminal if the cluster has endpoints
//	[svc ns name _proto _port]          SRV (spec 2.3.2, 2.4.2)
//	[svc ns name clusterid hostname]    headless: A/AAAA (spec 2.4.1)
func (a *answerer) lookup(rel []string) result {
	switch len(rel) {
	case 0:
		if a.want(mdns.TypeSOA) {
			a.m.Answer = append(a.m.Answer, a.r.soa)
		}
		return a.done()
	case 1:
		switch rel[0] {
		case "dns-version":
			if a.want(mdns.TypeTXT) {
				a.m.Answer = append(a.m.Answer, &mdns.TXT{Hdr: a.hdr(a.q.Name, mdns.TypeTXT), Txt: []string{SpecVersion}})
			}
			return a.done()
		case "svc":
			return empty
		}
		return nxdomain
	}
	if rel[0] != "svc" || len(rel) > 5 || !isLabel(rel[1]) {
		return nxdomain
	}
	if len(rel) == 2 {
		if a.r.namespaces != nil && !a.r.namespaces.HasNamespace(rel[1]) {
			return nxdomain
		}
		return empty
	}
	if !isLabel(rel[2]) {
		return nxdomain
	}
	imp, ok := a.r.imports.LookupImport(rel[1], rel[2])
	if !ok {
		return nxdomain
	}
	svcName := rel[2] + "." + rel[1] + ".svc." + a.r.zone
	switch imp.Type {
	case ClusterSetIP:
		return a.clusterSetIP(rel[3:], imp, svcName)
	case Headless:
		return a.headless(rel[3:], imp, svcName)
	}
	return nxdomain
}

func (a *answerer) clusterSetIP(rel []string, imp Import, svcName string) result {
	switch len(rel) {
	case 0:
		a.m.Answer = a.addrs(a.m.Answer, a.q.Name, imp.IPs, a.q.Qtype)
		return a.done()
	case 1:
		// No <clusterid>.<svc> names for ClusterSetIP (spec 2.3.4).
		return a.protoNode(rel[0], imp.Ports)
	case 2:
		ports := a.srvPorts(rel[0], rel[1], imp.Ports)
		if len(ports) == 0 {
			return nxdomain
		}
		if a.want(mdns.TypeSRV) {
			for _, p := range ports {
				a.m.Answer = append(a.m.Answer, a.srv(p.Port, svcName))
			}
			a.m.Extra = a.addrs(a.m.Extra, svcName, imp.IPs, mdns.TypeANY)
		}
		return a.done()
	}
	return nxdomain
}

func (a *answerer) headless(rel []string, imp Import, svcName string) result {
	if len(imp.Endpoints) == 0 {
		// "If there are no ready endpoints for the headless Service, the
		// answer should be NXDOMAIN" (spec 2.4.1).
		return nxdomain
	}
	switch len(rel) {
	case 0:
		for _, ep := range imp.Endpoints {
			a.m.Answer = a.addrs(a.m.Answer, a.q.Name, ep.Addrs, a.q.Qtype)
		}
		return a.done()
	case 1:
		if strings.HasPrefix(rel[0], "_") {
			return a.protoNode(rel[0], imp.Ports)
		}
		for _, ep := range imp.Endpoints {
			if strings.EqualFold(ep.Cluster, rel[0]) {
				return empty
			}
		}
		return nxdomain
	case 2:
		if strings.HasPrefix(rel[0], "_") {
			ports := a.srvPorts(rel[0], rel[1], imp.Ports)
			if len(ports) == 0 {
				return nxdomain
			}
			if !a.want(mdns.TypeSRV) {
				return empty
			}
			// One SRV per (endpoint, port); endpoints sharing a hostname in a
			// cluster share a target, which is listed once.
			seen := make(map[string]bool, len(imp.Endpoints))
			for _, ep := range imp.Endpoints {
				host := hostname(ep)
				if !isLabel(ep.Cluster) || host == "" {
					continue
				}
				target := host + "." + ep.Cluster + "." + svcName
				key := strings.ToLower(target)
				first := !seen[key]
				seen[key] = true
				if first {
					for _, p := range ports {
						a.m.Answer = append(a.m.Answer, a.srv(p.Port, target))
					}
				}
				a.m.Extra = a.addrs(a.m.Extra, target, ep.Addrs, mdns.TypeANY)
			}
			return a.done()
		}
		exists := false
		for _, ep := range imp.Endpoints {
			if strings.EqualFold(ep.Cluster, rel[0]) && strings.EqualFold(hostname(ep), rel[1]) {
				exists = true
				a.m.Answer = a.addrs(a.m.Answer, a.q.Name, ep.Addrs, a.q.Qtype)
			}
		}
		if !exists {
			return nxdomain
		}
		return a.done()
	}
	return nxdomain
}

// protoNode answers _<proto>.<svc>...: an empty non-terminal when a named
// port uses that protocol, else no such name.
func (a *answerer) protoNode(label string, ports []Port) result {
	for _, p := range ports {
		if p.Name != "" && protoLabel(p.Protocol) == label {
			return empty
		}
	}
	return nxdomain
}

// srvPorts returns the named ports matching _<port>._<proto> labels.
// Unnamed ports have no SRV records (spec 2.3.2).
func (a *answerer) srvPorts(protoLbl, portLbl string, ports []Port) []Port {
	if len(portLbl) < 2 || portLbl[0] != '_' || protoLbl == "" {
		return nil
	}
	var out []Port
	for _, p := range ports {
		if p.Name != "" && strings.EqualFold(p.Name, portLbl[1:]) && protoLabel(p.Protocol) == protoLbl {
			out = append(out, p)
		}
	}
	return out
}

func (a *answerer) srv(port uint16, target string) mdns.RR {
	return &mdns.SRV{
		Hdr:      a.hdr(a.q.Name, mdns.TypeSRV),
		Priority: srvPriority,
		Weight:   srvWeight,
		Port:     port,
		Target:   target,
	}
}

// addrs appends A (qt A or ANY) and AAAA (qt AAAA or ANY) records for ips.
func (a *answerer) addrs(rrs []mdns.RR, name string, ips []netip.Addr, qt uint16) []mdns.RR {
	for _, ip := range ips {
		ip = ip.Unmap()
		switch {
		case ip.Is4() && (qt == mdns.TypeA || qt == mdns.TypeANY):
			b := ip.As4()
			rrs = append(rrs, &mdns.A{Hdr: a.hdr(name, mdns.TypeA), A: b[:]})
		case ip.Is6() && (qt == mdns.TypeAAAA || qt == mdns.TypeANY):
			b := ip.As16()
			rrs = append(rrs, &mdns.AAAA{Hdr: a.hdr(name, mdns.TypeAAAA), AAAA: b[:]})
		}
	}
	return rrs
}

// hostname is the endpoint's DNS hostname: its own, or one derived from its
// first address; "" if it has neither a valid hostname nor an address.
func hostname(ep Endpoint) string {
	if ep.Hostname != "" {
		if isLabel(ep.Hostname) {
			return ep.Hostname
		}
		return ""
	}
	if len(ep.Addrs) == 0 || !ep.Addrs[0].IsValid() {
		return ""
	}
	ip := ep.Addrs[0].Unmap().WithZone("")
	if ip.Is4() {
		return strings.ReplaceAll(ip.String(), ".", "-")
	}
	return strings.ReplaceAll(ip.StringExpanded(), ":", "-")
}
