package iperf

import (
	"strings"
	"testing"
)

const tcpRun = `{"start":{},"intervals":[{"sum":{"seconds":0.5,"bits_per_second":1e9}}],
"end":{"sum_sent":{"bytes":2000,"retransmits":7},"sum_received":{"bytes":1900}},
"server_output_json":{"intervals":[
 {"sum":{"seconds":0.5,"bytes":1,"bits_per_second":9.4e8}},
 {"sum":{"seconds":0.5,"bytes":1,"bits_per_second":9.5e8}},
 {"sum":{"seconds":0.5,"bytes":1,"bits_per_second":9.6e8}},
 {"sum":{"seconds":0.01,"bytes":1,"bits_per_second":1e3}}],
 "end":{"sum_received":{"bytes":1900}}}}`

const udpRun = `{"intervals":[],"end":{"sum":{"bytes":5000,"lost_percent":3},"sum_received":{"bytes":4000}},
"server_output_json":{"intervals":[{"sum":{"seconds":1.0,"bits_per_second":2e9}}],
 "end":{"sum":{"bytes":0,"lost_percent":42.5}}}}`

func TestParse(t *testing.T) {
	r, err := Parse([]byte(tcpRun), 0.5, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.TrialGbps) != 2 || r.TrialGbps[0] != 0.94 || r.TrialGbps[1] != 0.95 || r.Bytes != 1900 || r.Retransmits != 7 {
		t.Errorf("tcp: %+v; want the first two whole intervals, 1900 bytes, 7 retransmits", r)
	}
	r, err = Parse([]byte(udpRun), 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.TrialGbps) != 1 || r.TrialGbps[0] != 2 || r.LostPercent != 42.5 || r.Bytes != 4000 {
		t.Errorf("udp: %+v", r)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"error":"unable to connect to server"}`, "unable to connect"},
		{`{"end":{}}`, "no server_output_json"},
		{`{"server_output_json":{"intervals":[],"end":{}}}`, "no server interval"},
		{`{"server_output_json":{"intervals":[{"sum":{"seconds":1,"bits_per_second":-1}}],"end":{}}}`, "server interval 0"},
		{`{"server_output_json":{"intervals":[{"sum":{"seconds":1,"bits_per_second":1}}],"end":{}}}`, "no sum"},
		{`[`, "iperf3 JSON"},
	} {
		if _, err := Parse([]byte(tc.in), 1, 5); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParsePing(t *testing.T) {
	out := `PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.
64 bytes from 10.0.0.2: icmp_seq=1 ttl=62 time=0.061 ms
64 bytes from 10.0.0.2: icmp_seq=3 ttl=62 time=10.5 ms

--- 10.0.0.2 ping statistics ---
3 packets transmitted, 2 received, 33.3333% packet loss, time 21ms
rtt min/avg/max/mdev = 0.061/5.280/10.500/5.219 ms
`
	p, err := ParsePing([]byte(out), 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sent != 3 || p.Received != 2 || len(p.RTTms) != 2 || p.RTTms[1] != 10.5 || p.LostPercent < 33 || p.LostPercent > 34 {
		t.Errorf("%+v", p)
	}
	for _, bad := range []string{"", "3 packets transmitted, 4 received", "0 packets transmitted, 0 received",
		"64 bytes from x: icmp_seq=1 time=1 ms\n64 bytes from x: icmp_seq=2 time=1 ms\n2 packets transmitted, 1 received"} {
		if _, err := ParsePing([]byte(bad), 3); err == nil {
			t.Errorf("ParsePing(%q): no error", bad)
		}
	}
	if _, err := ParsePing([]byte(out), 0); err == nil {
		t.Error("count 0: no error")
	}
}

// TestParsePingDeadline: run with -w, ping sent 5 requests for a count of
// 3 and got replies to all 5, one duplicated; replies to requests 4 and 5
// do not count, nor does the duplicate, and the loss is of the first 3.
func TestParsePingDeadline(t *testing.T) {
	out := `64 bytes from 10.0.0.2: icmp_seq=2 ttl=62 time=40.1 ms
64 bytes from 10.0.0.2: icmp_seq=2 ttl=62 time=40.3 ms (DUP!)
64 bytes from 10.0.0.2: icmp_seq=4 ttl=62 time=9.2 ms
64 bytes from 10.0.0.2: icmp_seq=1 ttl=62 time=50.0 ms
64 bytes from 10.0.0.2: icmp_seq=5 ttl=62 time=1.0 ms

5 packets transmitted, 4 received, +1 duplicates, 20% packet loss, time 40ms
`
	p, err := ParsePing([]byte(out), 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sent != 3 || p.Received != 2 || len(p.RTTms) != 2 || p.RTTms[0] != 40.1 || p.RTTms[1] != 50 {
		t.Errorf("%+v, want 2 of 3 replies (seq 2 and 1)", p)
	}
}

// FuzzParse: neither parser panics, and what they accept is consistent.
func FuzzParse(f *testing.F) {
	for _, s := range []string{tcpRun, udpRun, `{}`, `{"server_output_json":null}`, "", "\xff",
		`{"server_output_json":{"intervals":[{"sum":{"seconds":1e308,"bits_per_second":1e308}}],"end":{"sum":{"bytes":1e308}}}}`,
		"1 packets transmitted, 1 received\n64 bytes from x: icmp_seq=1 time=1e999 ms",
		"99999999999999999999 packets transmitted, 1 received"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := Parse(b, 0.5, 50); err == nil && (len(r.TrialGbps) == 0 || len(r.TrialGbps) > 50) {
			t.Fatalf("accepted with %d trials", len(r.TrialGbps))
		}
		if p, err := ParsePing(b, 50); err == nil && (len(p.RTTms) != p.Received || p.Received > p.Sent || p.Sent > 50) {
			t.Fatalf("accepted %+v", p)
		}
	})
}
