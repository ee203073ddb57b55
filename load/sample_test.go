package load

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/apps"
)

var csvSamples = []Sample{
	{Thread: 1, Seq: 1, Start: time.UnixMicro(1_795_000_000_123_456).UTC(), Connect: 358 * time.Microsecond,
		TTFB: 531 * time.Microsecond, Total: 560 * time.Microsecond, Status: 200, BytesSent: 1154, BytesReceived: 1142},
	{Thread: 2, Seq: 7, Start: time.UnixMicro(1_795_000_000_200_000).UTC(), Total: 100 * time.Millisecond,
		Err: "read response: response timeout after 100ms"},
	{Thread: 1, Seq: 2, Start: time.UnixMicro(0).UTC(), Status: 500, Err: "quotes \", commas, and\nnewlines"},
}

const csvText = `thread,seq,start_unix_us,connect_us,ttfb_us,total_us,status,bytes_sent,bytes_received,error
1,1,1795000000123456,358,531,560,200,1154,1142,
2,7,1795000000200000,0,0,100000,0,0,0,read response: response timeout after 100ms
1,2,0,0,0,0,500,0,0,"quotes "", commas, and
newlines"
`

func TestWriteCSV(t *testing.T) {
	var b strings.Builder
	if err := WriteCSV(&b, csvSamples); err != nil {
		t.Fatal(err)
	}
	if b.String() != csvText {
		t.Errorf("got\n%s\nwant\n%s", b.String(), csvText)
	}
}

func TestCSVRoundTrip(t *testing.T) {
	got, err := ReadCSV(strings.NewReader(csvText))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, csvSamples) {
		t.Errorf("got %+v\nwant %+v", got, csvSamples)
	}
	// Samples measured by RunSeq survive the trip unchanged.
	url := startApp(t, apps.Config{Kind: apps.Echo})
	samples := run(t, SeqConfig{URL: url, Payload: 100, Requests: 3, Threads: 2, VerifyEcho: true})
	var b bytes.Buffer
	if err := WriteCSV(&b, samples); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, samples) {
		t.Errorf("round trip changed samples:\n%+v\n%+v", back, samples)
	}
}

func TestReadCSV(t *testing.T) {
	header := strings.Join(Columns, ",") + "\n"
	tests := []struct {
		name, in string
		want     string // error substring; "" for success
		n        int
	}{
		{"header only", header, "", 0},
		{"reordered and extra columns", "error,extra,bytes_received,bytes_sent,status,total_us,ttfb_us,connect_us,start_unix_us,seq,thread\nboom,?,1,2,3,4,5,6,7,8,9\n", "", 1},
		{"empty", "", "no header row", 0},
		{"missing column", "thread,seq\n1,1\n", `missing column "start_unix_us"`, 0},
		{"duplicate column", header[:len(header)-1] + ",seq\n", `column "seq" appears twice`, 0},
		{"not a number", header + "1,x,0,0,0,0,200,0,0,\n", `line 2: seq "x": not an integer`, 0},
		{"negative", header + "1,1,0,-5,0,0,200,0,0,\n", "line 2: connect_us -5: must not be negative", 0},
		{"huge status", header + "1,1,0,0,0,0,99999999999,0,0,\n", "status 99999999999: too large", 0},
		{"huge duration", header + "1,1,0,0,0,9223372036854775807,200,0,0,\n", "total_us 9223372036854775807: too large", 0},
		{"short row", header + "1,1,0\n", "wrong number of fields", 0},
	}
	for _, tt := range tests {
		got, err := ReadCSV(strings.NewReader(tt.in))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want == "" && len(got) != tt.n:
			t.Errorf("%s: %d samples, want %d", tt.name, len(got), tt.n)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	got, _ := ReadCSV(strings.NewReader(tests[1].in))
	want := Sample{Thread: 9, Seq: 8, Start: time.UnixMicro(7).UTC(), Connect: 6 * time.Microsecond, TTFB: 5 * time.Microsecond,
		Total: 4 * time.Microsecond, Status: 3, BytesSent: 2, BytesReceived: 1, Err: "boom"}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("columns by name: got %+v, want %+v", got, want)
	}
}

// FuzzReadCSV: ReadCSV never panics, and whatever it accepts survives
// WriteCSV and ReadCSV again unchanged.
func FuzzReadCSV(f *testing.F) {
	f.Add(csvText)
	f.Add(strings.Join(Columns, ",") + "\n")
	f.Add("error,thread,seq,start_unix_us,connect_us,ttfb_us,total_us,status,bytes_sent,bytes_received,x\n\"a\rb\",1,2,3,4,5,6,7,8,9,\n")
	f.Add(strings.Join(Columns, ",") + "\n0,0,0,0,0,0,0,0,0,\"a\r\r\r\nb\"\n")
	// Edges: nothing, numbers past int64, negative ones, invalid UTF-8,
	// a row cut short.
	f.Add("")
	f.Add(strings.Join(Columns, ",") + "\n1,18446744073709551616,99999999999999999999,1,1,1,200,1,1,\n")
	f.Add(strings.Join(Columns, ",") + "\n-1,-2,-1795000000123456,-358,-531,-560,-200,-1154,-1142,\n")
	f.Add(strings.Join(Columns, ",") + "\n1,1,1,1,1,1,200,1,1,\xff\xfe\xc3\n")
	f.Add(strings.Join(Columns, ",") + "\n1,1,1795000000123456,358")
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteCSV(&b, samples); err != nil {
			t.Fatal(err)
		}
		again, err := ReadCSV(&b)
		if err != nil {
			t.Fatalf("reading what WriteCSV wrote: %v\n%q", err, b.String())
		}
		if len(samples) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(again, samples) {
			t.Fatalf("round trip changed samples:\n%+v\n%+v", samples, again)
		}
	})
}

// BenchmarkKeepAliveEcho1KB is one request of `strait load seq` with a
// 1 KB payload against the echo app over loopback, keep-alive, verified.
func BenchmarkKeepAliveEcho1KB(b *testing.B) {
	url := startApp(b, apps.Config{Kind: apps.Echo})
	c, err := newClient(SeqConfig{URL: url, Payload: 1024, VerifyEcho: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	payload := make([]byte, 1024)
	FillPayload(payload, 1, 1)
	ctx := context.Background()
	b.SetBytes(2 * 1024)
	for b.Loop() {
		var s Sample
		c.do(ctx, payload, &s)
		if s.Err != "" {
			b.Fatal(s.Err)
		}
	}
}

// BenchmarkKeepAliveEcho1KBNetHTTP is the same exchange through
// net/http's client, for comparison with our own client.
func BenchmarkKeepAliveEcho1KBNetHTTP(b *testing.B) {
	url := startApp(b, apps.Config{Kind: apps.Echo})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	payload := make([]byte, 1024)
	FillPayload(payload, 1, 1)
	got := make([]byte, 0, 4096)
	b.SetBytes(2 * 1024)
	for b.Loop() {
		resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(payload))
		if err != nil {
			b.Fatal(err)
		}
		got = got[:0]
		buf := bytes.NewBuffer(got)
		_, err = io.Copy(buf, resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), payload) {
			b.Fatalf("echo: %v", err)
		}
	}
}
