package dns

import (
	"errors"
	"net/netip"
	"strings"
)

// maxLabels bounds the labels we parse: a 255-octet wire name has at most
// 127 labels.
const maxLabels = 127

var (
	errBadEscape = errors.New("bad escape in name")
	errEmptyLbl  = errors.New("empty label in name")
	errLongLabel = errors.New("label longer than 63 octets")
	errLongName  = errors.New("name longer than 255 octets")
)

// splitName splits a domain name in presentation format (as
// github.com/miekg/dns gives it: "\." and "\DDD" escapes, trailing dot
// optional) into its raw labels, lowercased (ASCII only, RFC 4343), in
// order from the leftmost. The root is "." or "" and has no labels.
//
// Decoding escapes matters: "a\.b" is one label that must never match the
// two labels "a" and "b".
func splitName(s string) ([]string, error) {
	if s == "." || s == "" {
		return nil, nil
	}
	var (
		labels []string
		cur    = make([]byte, 0, 63)
		wire   = 1 // root octet
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if len(cur) == 0 {
				return nil, errEmptyLbl
			}
			if len(labels) == maxLabels {
				return nil, errLongName
			}
			labels = append(labels, string(cur))
			wire += 1 + len(cur)
			cur = cur[:0]
			continue
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errBadEscape
			}
			if isDigit(s[i+1]) {
				if i+3 >= len(s) || !isDigit(s[i+2]) || !isDigit(s[i+3]) {
					return nil, errBadEscape
				}
				v := int(s[i+1]-'0')*100 + int(s[i+2]-'0')*10 + int(s[i+3]-'0')
				if v > 255 {
					return nil, errBadEscape
				}
				c = byte(v)
				i += 3
			} else {
				c = s[i+1]
				i++
			}
		}
		if len(cur) == 63 {
			return nil, errLongLabel
		}
		cur = append(cur, lower(c))
	}
	if len(cur) > 0 {
		if len(labels) == maxLabels {
			return nil, errLongName
		}
		labels = append(labels, string(cur))
		wire += 1 + len(cur)
	}
	if wire > 255 {
		return nil, errLongName
	}
	return labels, nil
}

// relLabels returns the labels of name below zone, reversed so that [0] is
// the label just under the zone apex, and whether name is in zone at all.
// Both arguments are lowercase raw labels (see splitName).
func relLabels(name, zone []string) ([]string, bool) {
	if len(name) < len(zone) {
		return nil, false
	}
	n := len(name) - len(zone)
	for i, z := range zone {
		if name[n+i] != z {
			return nil, false
		}
	}
	rel := make([]string, n)
	for i := range n {
		rel[i] = name[n-1-i]
	}
	return rel, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// isLabel reports whether s is an RFC 1123 label: 1-63 letters, digits and
// '-', not starting or ending with '-'. Cluster IDs, hostnames, namespaces,
// service and port names are all of this form; anything else in a query
// cannot match.
func isLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '-') {
			return false
		}
	}
	return true
}

// reverseAddr parses the labels of a name in in-addr.arpa or ip6.arpa
// (lowercase, leftmost first). inTree reports whether the name is below
// either tree at all; ok whether it names exactly one address.
func reverseAddr(labels []string) (addr netip.Addr, inTree, ok bool) {
	n := len(labels)
	if n < 2 || labels[n-1] != "arpa" {
		return netip.Addr{}, false, false
	}
	switch labels[n-2] {
	case "in-addr":
		if n != 2+4 {
			return netip.Addr{}, true, false
		}
		var b [4]byte
		for i := range 4 {
			l := labels[3-i]
			if len(l) == 0 || len(l) > 3 || len(l) > 1 && l[0] == '0' {
				return netip.Addr{}, true, false
			}
			v := 0
			for j := 0; j < len(l); j++ {
				if !isDigit(l[j]) {
					return netip.Addr{}, true, false
				}
				v = v*10 + int(l[j]-'0')
			}
			if v > 255 {
				return netip.Addr{}, true, false
			}
			b[i] = byte(v)
		}
		return netip.AddrFrom4(b), true, true
	case "ip6":
		if n != 2+32 {
			return netip.Addr{}, true, false
		}
		var b [16]byte
		for i := range 32 {
			l := labels[31-i]
			if len(l) != 1 {
				return netip.Addr{}, true, false
			}
			v := strings.IndexByte("0123456789abcdef", l[0])
			if v < 0 {
				return netip.Addr{}, true, false
			}
			b[i/2] |= byte(v) << (4 * (1 - i%2))
		}
		return netip.AddrFrom16(b), true, true
	}
	return netip.Addr{}, false, false
}
