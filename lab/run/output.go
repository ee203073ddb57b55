package run

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// requestsWriter writes requests.csv: the cell's columns, then the load
// generator's own columns (load.Columns), one row per request.
type requestsWriter struct {
	w      *bufio.Writer
	header bool
	buf    bytes.Buffer
}

func newRequestsWriter(w io.Writer) *requestsWriter { return &requestsWriter{w: bufio.NewWriter(w)} }

func (rw *requestsWriter) write(cell Cell, rep int, samples []load.Sample) error {
	rw.buf.Reset()
	if err := load.WriteCSV(&rw.buf, samples); err != nil {
		return err
	}
	header, rows, _ := strings.Cut(rw.buf.String(), "\n")
	if !rw.header {
		fmt.Fprintf(rw.w, "scenario,tool,workload,payload_bytes,repetition,%s\n", header)
		rw.header = true
	}
	prefix := fmt.Sprintf("%s,%s,%s,%d,%d,", cell.Scenario, cell.Tool, cell.Workload, cell.Payload, rep)
	for _, line := range strings.SplitAfter(rows, "\n") {
		if line != "" {
			rw.w.WriteString(prefix)
			rw.w.WriteString(line)
		}
	}
	return nil
}

func (rw *requestsWriter) flush() error { return rw.w.Flush() }

// jtlWriter writes JMeter's CSV result format (a .jtl file with JMeter's
// default columns), for people who feed results to JMeter tooling. The
// label names the cell; times are in milliseconds as JMeter writes them.
type jtlWriter struct {
	w      *csv.Writer
	header bool
}

func newJTLWriter(w io.Writer) *jtlWriter { return &jtlWriter{w: csv.NewWriter(w)} }

var jtlColumns = []string{"timeStamp", "elapsed", "label", "responseCode", "responseMessage", "threadName",
	"dataType", "success", "failureMessage", "bytes", "sentBytes", "grpThreads", "allThreads", "URL",
	"Latency", "IdleTime", "Connect"}

func (j *jtlWriter) write(cell Cell, samples []load.Sample) error {
	if !j.header {
		if err := j.w.Write(jtlColumns); err != nil {
			return err
		}
		j.header = true
	}
	label := fmt.Sprintf("%s/%s/%s/%s", cell.Scenario, cell.Tool, cell.Workload, report.FormatSize(cell.Payload))
	threads := 0
	for _, s := range samples {
		threads = max(threads, s.Thread)
	}
	for _, s := range samples {
		msg := "OK"
		if !s.OK() {
			msg = s.Err
		}
		if err := j.w.Write([]string{
			strconv.FormatInt(s.Start.UnixMilli(), 10),
			strconv.FormatInt(s.Total.Milliseconds(), 10),
			label,
			strconv.Itoa(s.Status),
			msg,
			fmt.Sprintf("%s 1-%d", label, s.Thread),
			"bin",
			strconv.FormatBool(s.OK()),
			s.Err,
			strconv.FormatInt(s.BytesReceived, 10),
			strconv.FormatInt(s.BytesSent, 10),
			strconv.Itoa(threads),
			strconv.Itoa(threads),
			"",
			strconv.FormatInt(s.TTFB.Milliseconds(), 10),
			"0",
			strconv.FormatInt(s.Connect.Milliseconds(), 10),
		}); err != nil {
			return err
		}
	}
	return nil
}

func (j *jtlWriter) flush() error {
	j.w.Flush()
	return j.w.Error()
}

func hostInfo() map[string]string {
	info := map[string]string{"go": runtime.Version(), "cpus": strconv.Itoa(runtime.NumCPU()), "cpuidle": cpuIdleDriver()}
	if out, err := exec.Command("uname", "-srm").Output(); err == nil {
		info["kernel"] = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				info["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	return info
}
