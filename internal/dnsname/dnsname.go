// Package dnsname holds the RFC 1123 name rules that Kubernetes applies:
// cluster IDs, clusterset names and namespaces are labels, object names
// are subdomains. Identities, the catalog and every configuration check
// them the same way.
package dnsname

import (
	"regexp"
	"strings"
)

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// IsLabel reports whether s is an RFC 1123 label: lowercase letters,
// digits and '-', starting and ending alphanumeric, at most 63 long.
func IsLabel(s string) bool { return len(s) <= 63 && labelRE.MatchString(s) }

// IsSubdomain reports whether s is an RFC 1123 subdomain: labels joined by
// dots, at most 253 long.
func IsSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !IsLabel(l) {
			return false
		}
	}
	return true
}
