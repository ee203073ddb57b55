package usage

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"1 (a) S 0 1 1 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 100 10", 13, ""},
		// A command name with spaces and a ')' of its own.
		{"42 (x) y (z)) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 5 100 10", 300, ""},
		{"1 a S", 0, "no ')'"},
		{"1 (a) S 0 1", 0, "fields after the command name"},
		{"1 (a) S 0 1 1 0 -1 0 0 0 0 0 -7 3 0 0 20", 0, "utime"},
		{"1 (a) S 0 1 1 0 -1 0 0 0 0 0 1 99999999999999999999 0 0 20", 0, "stime"},
	} {
		got, err := ParseStat([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseStat(%q) = %d, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseStat(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseStatus(t *testing.T) {
	st := "Name:\tx\nVmPeak:\t  2000 kB\nVmHWM:\t    1500 kB\nVmRSS:\t 1000 kB\n"
	if v, err := ParseStatus([]byte(st), "VmHWM"); err != nil || v != 1500*1024 {
		t.Errorf("VmHWM = %d, %v", v, err)
	}
	for _, bad := range []string{"Name: x\n", "VmHWM: 12 MB\n", "VmHWM: -1 kB\n", "VmHWM: x kB\n"} {
		if v, err := ParseStatus([]byte(bad), "VmHWM"); err == nil {
			t.Errorf("ParseStatus(%q) = %d, want an error", bad, v)
		}
	}
}

// TestWindow measures a real process that burns CPU and grows its memory
// inside the window: both must show, and a gone process must be an error.
func TestWindow(t *testing.T) {
	// python3 is in every lab host's setup (Debian).
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	cmd := exec.Command(py, "-c", `
import sys
sys.stdin.readline()
b = bytearray(64 << 20)
for i in range(0, len(b), 4096): b[i] = 1
n = 0
while n < 5000000: n += 1
print("done", flush=True)
sys.stdin.readline()
`)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	w, err := Open([]Target{{Name: "burner", Node: "host", PID: cmd.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	buf := make([]byte, 5)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatal(err)
	}
	r, d, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 || r[0].CPUSeconds <= 0 || r[0].PeakRSSBytes < 64<<20 {
		t.Errorf("readings %+v over %v: want CPU time and a peak of at least 64 MiB", r, d)
	}
	stdin.Write([]byte("end\n"))
	cmd.Wait()
	w2 := &Window{targets: []Target{{Name: "gone", PID: cmd.Process.Pid}}, cpu: []float64{0}}
	if _, _, err := w2.Close(); err == nil {
		t.Error("Close of an exited process: no error")
	}
	if _, err := Open([]Target{{Name: "gone", PID: cmd.Process.Pid}}); err == nil || !os.IsNotExist(unwrapAll(err)) && !strings.Contains(err.Error(), "no such") {
		t.Errorf("Open of an exited process: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
