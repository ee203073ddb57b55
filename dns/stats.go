package dns

import (
	"sync/atomic"

	mdns "github.com/miekg/dns"
)

// Stats is a snapshot of the server's counters, all monotonic since New.
type Stats struct {
	// Responses counts answered messages.
	Responses uint64
	// ByType counts responses by question type: "A", "AAAA", "SRV", "TXT",
	// "SOA", "PTR", "ANY", "other", and "none" for messages whose question
	// could not be read.
	ByType map[string]uint64
	// ByRcode counts responses by rcode: "NOERROR", "FORMERR", "SERVFAIL",
	// "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other".
	ByRcode map[string]uint64
	// Truncated counts responses sent with the TC bit (UDP, or TCP answers
	// over 64 KiB).
	Truncated uint64
	// Dropped counts messages not answered: shorter than a DNS header, or
	// responses rather than queries.
	Dropped uint64
	// SocketErrors counts socket read, write and accept errors other than
	// shutdown.
	SocketErrors uint64
	// TCPRejected counts TCP connections closed at once because
	// Config.MaxTCPConns were open.
	TCPRejected uint64
}

var (
	typeNames  = [...]string{"A", "AAAA", "SRV", "TXT", "SOA", "PTR", "ANY", "other", "none"}
	rcodeNames = [...]string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other"}
)

type counters struct {
	byType       [len(typeNames)]atomic.Uint64
	byRcode      [len(rcodeNames)]atomic.Uint64
	truncated    atomic.Uint64
	dropped      atomic.Uint64
	socketErrors atomic.Uint64
	tcpRejected  atomic.Uint64
}

// count records one response; qt < 0 means no question was read.
func (c *counters) count(qt, rcode int) {
	t := 7
	switch {
	case qt < 0:
		t = 8
	case qt == int(mdns.TypeA):
		t = 0
	case qt == int(mdns.TypeAAAA):
		t = 1
	case qt == int(mdns.TypeSRV):
		t = 2
	case qt == int(mdns.TypeTXT):
		t = 3
	case qt == int(mdns.TypeSOA):
		t = 4
	case qt == int(mdns.TypePTR):
		t = 5
	case qt == int(mdns.TypeANY):
		t = 6
	}
	c.byType[t].Add(1)
	r := 7
	switch rcode {
	case mdns.RcodeSuccess:
		r = 0
	case mdns.RcodeFormatError:
		r = 1
	case mdns.RcodeServerFailure:
		r = 2
	case mdns.RcodeNameError:
		r = 3
	case mdns.RcodeNotImplemented:
		r = 4
	case mdns.RcodeRefused:
		r = 5
	case mdns.RcodeBadVers:
		r = 6
	}
	c.byRcode[r].Add(1)
}

func (c *counters) snapshot() Stats {
	s := Stats{
		ByType:       make(map[string]uint64, len(typeNames)),
		ByRcode:      make(map[string]uint64, len(rcodeNames)),
		Truncated:    c.truncated.Load(),
		Dropped:      c.dropped.Load(),
		SocketErrors: c.socketErrors.Load(),
		TCPRejected:  c.tcpRejected.Load(),
	}
	for i, n := range typeNames {
		v := c.byType[i].Load()
		s.ByType[n] = v
		s.Responses += v
	}
	for i, n := range rcodeNames {
		s.ByRcode[n] = c.byRcode[i].Load()
	}
	return s
}
