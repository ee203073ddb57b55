package packet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
)

// BenchmarkThroughput compares, in one run, single-stream TCP and UDP
// through the packet path with the kernel VXLAN peer, the VXLAN peer with
// nftables doing the packet path's translation (DNAT and SNAT on the
// exporting gateway) and direct routing over the same namespaces (iperf3,
// 5 s each). It reads the attached programs' run-time statistics during
// the packet path's TCP run (a run of an import or export program is then
// mostly a GSO super-packet, of a reply program an ACK) and during a UDP
// run at a fixed 300 Mbit/s of 1400-byte datagrams (one packet a run), and
// the host's busy CPU time per datagram of that UDP run in every mode
// (/proc/stat, which counts the whole host: other work on it adds to every
// mode alike only on a quiet machine). Run it with -benchtime 1x; it prints
// a table and reports the ratios.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./packet
//
// STRAIT_THROUGHPUT_MODES (e.g. "packet") runs only the modes it lists,
// comma-separated: the packet programs' run-time statistics alone take a
// quarter of the time, for alternating runs of two versions.
func BenchmarkThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Skip("needs iperf3")
	}
	modes := []string{"direct", "vxlan", "nft", "packet"}
	if v := os.Getenv("STRAIT_THROUGHPUT_MODES"); v != "" {
		var want []string
		for _, m := range strings.Split(v, ",") {
			if !slices.Contains(modes, m) {
				b.Fatalf("STRAIT_THROUGHPUT_MODES: unknown mode %q (known: %s)", m, strings.Join(modes, ","))
			}
			want = append(want, m)
		}
		modes = want
	}
	tcp := map[string]float64{}
	udpLoss := map[string]float64{}
	cpuPerPacket := map[string]float64{}
	gapTCP, gapUDP := map[string]float64{}, map[string]float64{}
	var stats, udpStats map[string]progStats
	for b.Loop() {
		for _, mode := range modes {
			c := newClusters(b, mode)
			testenv.Start(b, "ip", "netns", "exec", c.sb, "iperf3", "-s", "-B", "10.2.0.2")
			watches := c.stopwatches(b, mode)
			var stop func() map[string]progStats
			// The stopwatches' first programs (a per-CPU slot, one
			// clock read, one store) under the same statistics: what
			// the statistics' own clock reads and bookkeeping add to
			// any program run, the floor under the packet programs'
			// figures.
			floor := map[string]*ebpf.Program{
				"ga/stopwatch_start": watches[watchImport].progs[0],
				"gb/stopwatch_start": watches[watchExport].progs[0],
			}
			if mode == "packet" {
				stop = c.runStats(b, floor)
			}
			tcp[mode] = iperf(b, c, "-t", "5")
			if stop != nil {
				stats = stop()
				stop = c.runStats(b, floor)
			}
			for _, w := range watchPaths {
				gapTCP[w+" "+mode], _ = watches[w].read(b)
			}
			before := busyCPU(b)
			udp := iperfJSON(b, c, "-t", "5", "-u", "-b", "300M", "-l", "1400")
			if n := udp.End.Sum.Packets; n > 0 {
				cpuPerPacket[mode] = float64(busyCPU(b)-before) / float64(n)
			}
			if stop != nil {
				udpStats = stop()
			}
			for _, w := range watchPaths {
				gapUDP[w+" "+mode], _ = watches[w].read(b)
			}
			udp = iperfJSON(b, c, "-t", "5", "-u", "-b", "900M", "-l", "1400")
			udpLoss[mode] = udp.End.Sum.LostPercent
		}
	}
	b.Logf("load average at the end: %s", loadavg())
	for _, m := range modes {
		b.Logf("%-7s TCP %6.2f Gbit/s   UDP 900 Mbit/s offered: %.3f %% lost   UDP 300 Mbit/s: %6.0f ns host CPU per datagram",
			m, tcp[m]/1e9, udpLoss[m], cpuPerPacket[m])
	}
	b.Logf("ns between a gateway node's hooks per packet (stopwatch), TCP run / UDP 300 Mbit/s run:")
	for _, w := range watchPaths {
		line := ""
		for _, m := range modes {
			line += fmt.Sprintf("   %s %5.0f / %5.0f", m, gapTCP[w+" "+m], gapUDP[w+" "+m])
		}
		b.Logf("%-30s%s", w, line)
	}
	for _, name := range sortedKeys(stats) {
		s := stats[name]
		b.Logf("TCP %-20s %9d runs  %6.0f ns/run", name, s.runs, s.nsPerRun())
	}
	for _, name := range sortedKeys(udpStats) {
		s := udpStats[name]
		b.Logf("UDP %-20s %9d runs  %6.0f ns/run", name, s.runs, s.nsPerRun())
	}
	if tcp["vxlan"] > 0 {
		b.ReportMetric(tcp["packet"]/tcp["vxlan"], "packet/vxlan-tcp")
	}
	if tcp["direct"] > 0 {
		b.ReportMetric(tcp["packet"]/tcp["direct"], "packet/direct-tcp")
	}
	b.ReportMetric(udpLoss["packet"], "packet-udp-loss-%")
	if s, ok := stats["ga/lan_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/import-run")
	}
	if s, ok := stats["gb/tun_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/export-run")
	}
	if s, ok := stats["gb/lan_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/nat-reply-run")
	}
	if s, ok := udpStats["gb/tun_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/export-udp-packet")
	}
	if s, ok := udpStats["ga/lan_ingress"]; ok {
		b.ReportMetric(s.nsPerRun(), "ns/import-udp-packet")
	}
	for _, m := range modes {
		b.ReportMetric(cpuPerPacket[m], "ns-cpu/udp-packet-"+m)
		b.ReportMetric(gapUDP[watchExport+" "+m], "ns/gb-export-udp-packet-"+m)
		b.ReportMetric(gapTCP[watchReply+" "+m], "ns/gb-reply-tcp-ack-"+m)
	}
}

// The paths the benchmark times on the gateway nodes with stopwatches.
const (
	watchImport   = "ga: lan in → wan out (import)"
	watchExport   = "gb: tunnel in → lan out (export)"
	watchReply    = "gb: lan in → wan out (reply)"
	watchDelivery = "ga: tunnel in → lan out (delivery)"
)

var watchPaths = []string{watchImport, watchExport, watchReply, watchDelivery}

// stopwatches times the four paths through the gateway nodes. The tunnel
// device is the one packets leave the underlay by: the packet mode's
// collect_md VXLAN device, the vxlan peer's, or (direct) the WAN link.
func (c *clusters) stopwatches(b *testing.B, mode string) map[string]*stopwatch {
	tunA, tunB := "vx", "vx"
	switch mode {
	case "direct":
		tunA, tunB = "wan", "wan"
	case "packet":
		tunA, tunB = c.da.cfg.Tunnel, c.db.cfg.Tunnel
	}
	w := map[string]*stopwatch{}
	for _, p := range []struct{ name, ns, from, to string }{
		{watchImport, c.ga, "lan", "wan"},
		{watchExport, c.gb, tunB, "lan"},
		{watchReply, c.gb, "lan", "wan"},
		{watchDelivery, c.ga, tunA, "lan"},
	} {
		w[p.name] = newStopwatch(b)
		w[p.name].attach(b, p.ns, p.from, p.to)
	}
	return w
}

// busyCPU is the host's busy CPU time so far (user, nice, system, irq and
// softirq in /proc/stat's first line), in nanoseconds.
func busyCPU(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/stat")
	must(b, err)
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		b.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, err := strconv.ParseInt(f[i], 10, 64)
		must(b, err)
		busy += v
	}
	// /proc/stat counts in USER_HZ, 100 a second on Linux.
	return busy * int64(time.Second/100)
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
			Packets       int64   `json:"packets"`
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
// returns a function that reads, per attached program and per program of
// extra, the runs and time since this call.
func (c *clusters) runStats(b *testing.B, extra map[string]*ebpf.Program) func() map[string]progStats {
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
		for name, p := range extra {
			st, err := p.Stats()
			must(b, err)
			out[name] = progStats{st.RunCount, st.Runtime}
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
