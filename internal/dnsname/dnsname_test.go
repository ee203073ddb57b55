package dnsname

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		s                string
		label, subdomain bool
	}{
		{"a", true, true}, {"a-b", true, true}, {"0", true, true}, {"a.b", false, true},
		{"-a", false, false}, {"a-", false, false}, {"A", false, false}, {"", false, false},
		{strings.Repeat("a", 63), true, true}, {strings.Repeat("a", 64), false, false},
		{"a..b", false, false}, {"a_b", false, false}, {"a.", false, false},
		{strings.Repeat("a.", 126) + "a", false, true}, {strings.Repeat("a.", 127) + "a", false, false},
	} {
		if got := IsLabel(tt.s); got != tt.label {
			t.Errorf("IsLabel(%q) = %v", tt.s, got)
		}
		if got := IsSubdomain(tt.s); got != tt.subdomain {
			t.Errorf("IsSubdomain(%q) = %v", tt.s, got)
		}
	}
}
