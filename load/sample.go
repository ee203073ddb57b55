// Package load generates load against a workload and records every request.
//
// The seq generator (RunSeq) reproduces the seed papers' JMeter tests: a
// closed loop of N sequential requests per thread, keep-alive on or off,
// think time, connect and response timeouts. Each request becomes a Sample;
// WriteCSV and ReadCSV move samples between the load generator (run inside
// a network namespace) and the lab runner.
package load

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Sample is the record of one request.
type Sample struct {
	// Thread numbers the thread (virtual user) from 1.
	Thread int
	// Seq numbers the thread's measured requests from 1; warm-up requests
	// are not recorded.
	Seq int
	// Start is when the request started (before connecting, if it had to
	// connect), with microsecond precision.
	Start time.Time
	// Connect is the time to establish the TCP connection, name resolution
	// included; zero when the request reused a keep-alive connection.
	Connect time.Duration
	// TTFB is the time from Start to the first byte of the response.
	TTFB time.Duration
	// Total is the time from Start to the last byte of the response body:
	// the response time JMeter reports as "elapsed".
	Total time.Duration
	// Status is the HTTP status code, 0 when no response arrived.
	Status int
	// BytesSent counts the request as written: request line, headers and
	// body.
	BytesSent int64
	// BytesReceived counts the response as read: status line, headers and
	// body.
	BytesReceived int64
	// Err describes why the request failed; empty when it succeeded.
	Err string
}

// OK reports whether the request succeeded.
func (s Sample) OK() bool { return s.Err == "" }

// Columns are the CSV header, in the order WriteCSV writes them.
//
// The CSV file has one header row and one row per request:
//
//	thread          thread number, from 1
//	seq             request number within the thread, from 1 (warm-up requests are not written)
//	start_unix_us   request start, microseconds since the Unix epoch (UTC)
//	connect_us      TCP connect time in µs, name resolution included; 0 when the connection was reused
//	ttfb_us         time to first response byte in µs, from start (connect included)
//	total_us        response time in µs, from start to the last body byte (connect included)
//	status          HTTP status code; 0 when no response arrived
//	bytes_sent      request bytes written: request line, headers and body
//	bytes_received  response bytes read: status line, headers and body
//	error           empty when the request succeeded; otherwise why it failed
//	                (connect or response timeout, reset, unexpected status, echo mismatch, ...)
//
// Readers find columns by name and ignore columns they do not know, so
// columns may be added later, never renamed.
var Columns = []string{
	"thread", "seq", "start_unix_us", "connect_us", "ttfb_us", "total_us",
	"status", "bytes_sent", "bytes_received", "error",
}

// WriteCSV writes a header row and one row per sample. Times are written in
// whole microseconds.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Columns); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	row := make([]string, len(Columns))
	for _, s := range samples {
		row[0] = strconv.Itoa(s.Thread)
		row[1] = strconv.Itoa(s.Seq)
		row[2] = strconv.FormatInt(s.Start.UnixMicro(), 10)
		row[3] = strconv.FormatInt(s.Connect.Microseconds(), 10)
		row[4] = strconv.FormatInt(s.TTFB.Microseconds(), 10)
		row[5] = strconv.FormatInt(s.Total.Microseconds(), 10)
		row[6] = strconv.Itoa(s.Status)
		row[7] = strconv.FormatInt(s.BytesSent, 10)
		row[8] = strconv.FormatInt(s.BytesReceived, 10)
		row[9] = csvLineBreaks(s.Err)
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// csvLineBreaks turns every "\r\n" in a field into "\n". encoding/csv
// reads "\r\n" inside a quoted field as "\n", so a field holding "\r\n"
// cannot survive a write and a read; normalizing on both sides makes
// ReadCSV return exactly what WriteCSV was given. A lone "\r" or "\n" is
// kept.
func csvLineBreaks(s string) string {
	for strings.Contains(s, "\r\n") {
		s = strings.ReplaceAll(s, "\r\n", "\n")
	}
	return s
}

// ReadCSV reads what WriteCSV wrote. The header row is required; columns
// are matched by name, unknown ones ignored. Start comes back in UTC.
func ReadCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = 0
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("read csv: no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("read csv: %w", err)
	}
	idx := make([]int, len(Columns))
	for i := range idx {
		idx[i] = -1
	}
	for j, name := range header {
		for i, c := range Columns {
			if name == c {
				if idx[i] >= 0 {
					return nil, fmt.Errorf("read csv: header: column %q appears twice", c)
				}
				idx[i] = j
			}
		}
	}
	for i, j := range idx {
		if j < 0 {
			return nil, fmt.Errorf("read csv: header: missing column %q", Columns[i])
		}
	}
	var out []Sample
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read csv: %w", err)
		}
		var s Sample
		var ints [9]int64
		for i := range 9 {
			v, err := strconv.ParseInt(rec[idx[i]], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read csv: line %d: %s %q: not an integer", line, Columns[i], rec[idx[i]])
			}
			if v < 0 {
				return nil, fmt.Errorf("read csv: line %d: %s %d: must not be negative", line, Columns[i], v)
			}
			ints[i] = v
		}
		const maxInt32 = 1<<31 - 1
		const maxDur = int64(1<<63-1) / int64(time.Microsecond)
		for _, i := range []int{0, 1, 6} {
			if ints[i] > maxInt32 {
				return nil, fmt.Errorf("read csv: line %d: %s %d: too large", line, Columns[i], ints[i])
			}
		}
		for _, i := range []int{3, 4, 5} {
			if ints[i] > maxDur {
				return nil, fmt.Errorf("read csv: line %d: %s %d: too large", line, Columns[i], ints[i])
			}
		}
		s.Thread = int(ints[0])
		s.Seq = int(ints[1])
		s.Start = time.UnixMicro(ints[2]).UTC()
		s.Connect = time.Duration(ints[3]) * time.Microsecond
		s.TTFB = time.Duration(ints[4]) * time.Microsecond
		s.Total = time.Duration(ints[5]) * time.Microsecond
		s.Status = int(ints[6])
		s.BytesSent = ints[7]
		s.BytesReceived = ints[8]
		s.Err = csvLineBreaks(rec[idx[9]])
		out = append(out, s)
	}
}
