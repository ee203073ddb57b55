package packet

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
)

// BenchmarkThroughput compares, in one run, single-stream TCP and UDP
// through the packet path with the kernel VXLAN peer and direct routing
// over the same namespaces (iperf3, 5 s each), and reads the attached
// programs' run-time statistics during the packet path's TCP run. Run it
// with -benchtime 1x; it prints a table and reports the ratios.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./packet
func BenchmarkThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Skip("needs iperf3")
	}
	modes := []string{"direct", "vxlan", "packet"}
	tcp := map[string]float64{}
	udpLoss := map[string]float64{}
	var stats map[string]progStats
	for b.Loop() {
		for _, mode := range modes {
			c := newClusters(b, mode)
			testenv.Start(b, "ip", "netns", "exec", c.sb, "iperf3", "-s", "-B", "10.2.0.2")
			var stop func() map[string]progStats
			if mode == "packet" {
				stop = c.runStats(b)
			}
			tcp[mode] = iperf(b, c, "-t", "5")
			if stop != nil {
				stats = stop()
			}
			udp := iperfJSON(b, c, "-t", "5", "-u", "-b", "900M", "-l", "1400")
			udpLoss[mode] = udp.End.Sum.LostPercent
		}
	}
	b.Logf("load average at the end: %s", loadavg())
	for _, m := range modes {
		b.Logf("%-7s TCP %6.2f Gbit/s   UDP 900 Mbit/s offered: %.3f %% lost", m, tcp[m]/1e9, udpLoss[m])
	}
	for name, s := range stats {
		b.Logf("%-16s %9d runs  %6.0f ns/run", name, s.runs, s.nsPerRun())
	}
	b.ReportMetric(tcp["packet"]/tcp["vxlan"], "packet/vxlan-tcp")
	b.ReportMetric(tcp["packet"]/tcp["direct"], "packet/direct-tcp")
	b.ReportMetric(udpLoss["packet"], "packet-udp-loss-%")
	if s, ok := stats["ga/lan_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/import-run")
	}
	if s, ok := stats["gb/tun_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/export-run")
	}
}

type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			LostPercent   float64 `json:"lost_percent"`
		} `json:"sum"`
	} `json:"end"`
}

func iperf(b *testing.B, c *clusters, args ...string) float64 {
	return iperfJSON(b, c, args...).End.SumReceived.BitsPerSecond
}

// iperfJSON runs an iperf3 client on the client node, retrying until the
// server listens.
func iperfJSON(b *testing.B, c *clusters, args ...string) iperfResult {
	b.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		argv := append([]string{"netns", "exec", c.ca, "iperf3", "-c", c.target, "-J"}, args...)
		out, err := exec.Command("ip", argv...).Output()
		if err == nil {
			var r iperfResult
			if err := json.Unmarshal(out, &r); err != nil {
				b.Fatalf("iperf3 output: %v", err)
			}
			if r.Error == "" && r.End.SumReceived.BitsPerSecond+r.End.Sum.BitsPerSecond > 0 {
				return r
			}
			err = fmt.Errorf("no result: %s", out)
		}
		if time.Now().After(deadline) {
			b.Fatalf("iperf3 %v: %v: %s", args, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type progStats struct {
	runs uint64
	ns   time.Duration
}

func (s progStats) nsPerRun() float64 {
	if s.runs == 0 {
		return 0
	}
	return float64(s.ns.Nanoseconds()) / float64(s.runs)
}

// runStats turns the kernel's BPF run-time statistics on (BPF_ENABLE_STATS:
// they stay on only while the returned function has not been called) and
// returns a function that reads, per attached program, the runs and time
// since this call.
func (c *clusters) runStats(b *testing.B) func() map[string]progStats {
	closer, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enable BPF stats: %v", err)
	}
	read := func() map[string]progStats {
		out := map[string]progStats{}
		for _, g := range []string{c.ga, c.gb} {
			for _, pin := range []string{pinLAN, pinTunnel} {
				l, err := link.LoadPinnedLink(filepath.Join(c.pins, g, pin), nil)
				must(b, err)
				info, err := l.Info()
				must(b, err)
				p, err := ebpf.NewProgramFromID(info.Program)
				must(b, err)
				st, err := p.Stats()
				must(b, err)
				name := fmt.Sprintf("%s/%s", g[len(g)-2:], map[string]string{pinLAN: "lan_ingress", pinTunnel: "tun_ingress"}[pin])
				out[name] = progStats{st.RunCount, st.Runtime}
				p.Close()
				l.Close()
			}
		}
		return out
	}
	before := read()
	return func() map[string]progStats {
		after := read()
		closer.Close()
		for k, a := range after {
			after[k] = progStats{a.runs - before[k].runs, a.ns - before[k].ns}
		}
		return after
	}
}

func loadavg() string {
	var info unix.Sysinfo_t
	if unix.Sysinfo(&info) != nil {
		return "?"
	}
	f := func(v uint64) float64 { return float64(v) / 65536 }
	return fmt.Sprintf("%.2f %.2f %.2f", f(info.Loads[0]), f(info.Loads[1]), f(info.Loads[2]))
}
