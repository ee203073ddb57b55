package emulation

import (
	"testing"
)

func FuzzParseFlag(f *testing.F) {
	for _, s := range []string{
		"", "none", "delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit",
		"delay=20ms,jitter=2ms,distribution=paretonormal,loss=1%,loss-correlation=25%,rate=12.5mbps,limit=100,reorder=true",
		"delay=0", "rate=0", "loss=100", "limit=-1", "delay=5ms,delay=6ms", "jitter=1ms,distribution=normal",
		// Edges: numbers past their type, negative, not numbers, invalid
		// UTF-8, a pair cut short.
		"delay=9223372036854775808ns", "delay=99999999999h", "rate=1e400gbit", "rate=18446744073709551616bit",
		"limit=9223372036854775808", "loss=1e-400%", "loss=NaN%", "delay=-5ms", "jitter=-1ms,delay=1ms", "rate=-1gbit",
		"loss=-0.1%", "loss-correlation=101%", "delay=\xff\xfems", "\xc3=1", "delay=", "delay", ",", "loss=0x10%",
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
		if p.RateOnly() {
			// What tc gets must stay in its ranges whatever the rate.
			if b, l := p.TBFBurst(), p.TBFLimit(); b < 1514 || l <= 0 || p.TBFQueueTime() < 0 {
				t.Fatalf("%q: tbf burst %d, limit %d, queue time %v", s, b, l, p.TBFQueueTime())
			}
			_ = p.TBFArgs()
		}
		mean, sd := p.DelayStats()
		if mean < 0 || sd < 0 {
			t.Fatalf("%q: negative delay statistics %v %v", s, mean, sd)
		}
	})
}
