package emulation

import (
	"testing"
)

func FuzzParseFlag(f *testing.F) {
	for _, s := range []string{
		"", "none", "delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit",
		"delay=20ms,jitter=2ms,distribution=paretonormal,loss=1%,loss-correlation=25%,rate=12.5mbps,limit=100,reorder=true",
		"delay=0", "rate=0", "loss=100", "limit=-1", "delay=5ms,delay=6ms", "jitter=1ms,distribution=normal",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseFlag(s)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseFlag(%q) accepted invalid params: %v", s, err)
		}
		// The rendered form parses back to the same impairment, and
		// renders the same again.
		flag := p.Flag()
		q, err := ParseFlag(flag)
		if err != nil {
			t.Fatalf("ParseFlag(%q) = %+v renders as %q, which does not parse: %v", s, p, flag, err)
		}
		if q.Flag() != flag {
			t.Fatalf("%q renders as %q, then as %q", s, flag, q.Flag())
		}
		_ = p.String()
		mean, sd := p.DelayStats()
		if mean < 0 || sd < 0 {
			t.Fatalf("%q: negative delay statistics %v %v", s, mean, sd)
		}
	})
}
