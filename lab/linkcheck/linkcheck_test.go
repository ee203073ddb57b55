package linkcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/emulator"
)

func TestWilson(t *testing.T) {
	for _, tc := range []struct {
		k, n   uint64
		lo, hi float64 // reference values (Wilson score, z = 1.96)
	}{
		{0, 100, 0, 0.0370},
		{160, 200000, 0.000685, 0.000934},
		{50, 100, 0.4038, 0.5962},
	} {
		lo, hi := wilson(tc.k, tc.n)
		if math.Abs(lo-tc.lo) > 5e-4*math.Max(tc.lo, 0.01) || math.Abs(hi-tc.hi) > 5e-4*math.Max(tc.hi, 0.01) {
			t.Errorf("wilson(%d, %d) = %.6f–%.6f, want %.6f–%.6f", tc.k, tc.n, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestSpreadAndPPS(t *testing.T) {
	p := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond}
	if s := spread(p); s != 2*time.Millisecond {
		t.Errorf("uniform ±1ms spread %v, want 2ms", s)
	}
	p.Distribution = emulation.Normal
	if s := spread(p); s < 7*time.Millisecond || s > 8*time.Millisecond {
		t.Errorf("normal spread %v, want about 7.5 jitters", s)
	}
	// 10 Mbit/s: a quarter of it in 76-byte datagrams.
	if got := lossPPS(emulation.Params{Rate: 10e6}, emulation.Params{}); got != 4111 {
		t.Errorf("lossPPS at 10 Mbit/s = %d, want 4111", got)
	}
}

func TestChecksJudge(t *testing.T) {
	p := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.1, Rate: 1e9}
	r := Result{AtoB: p, BtoA: p}
	// Synthetic samples with the exact target statistics pass.
	for i := range 1000 {
		u := float64(i)/999*2 - 1 // uniform on [-1, 1]
		d := int64(5e6 + 1e6*u)
		r.RTT.Samples = append(r.RTT.Samples, Sample{Seq: uint64(i), Fwd: d, Rev: 10e6 - d, RTT: 10e6})
	}
	r.RTT.Sent = 1000
	r.Loss.AtoB = Flood{Sent: 200000, Received: 199800}
	r.Loss.BtoA = Flood{Sent: 200000, Received: 199000} // 0.5 %: must fail
	r.Up = BulkReport{Transfer: Transfer{Bytes: 1, SteadyBytes: 116e6, SteadySecond: 1}, MSS: 1448, HeaderBytes: 52}
	verdicts := map[string]bool{}
	for _, c := range r.Checks() {
		if c.Judged {
			verdicts[c.Name] = c.Pass
		}
	}
	want := map[string]bool{
		"a-to-b delay mean": true, "a-to-b delay sd": true, "rtt mean": true,
		"rtt sd":      false, // every synthetic RTT is 10 ms exactly
		"a-to-b loss": true, "b-to-a loss": false,
		"a-to-b tcp goodput": true, "a-to-b rate (IP bytes)": true,
	}
	for name, pass := range want {
		if got, ok := verdicts[name]; !ok || got != pass {
			t.Errorf("%s: pass=%v (judged %v), want %v", name, got, ok, pass)
		}
	}
	var buf bytes.Buffer
	r.Table(&buf)
	if !strings.Contains(buf.String(), "FAIL") || !strings.Contains(buf.String(), "PASS") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func FuzzDecodeProbe(f *testing.F) {
	f.Add((&probe{kind: kindEcho, seq: 7, t1: 1}).encode(make([]byte, probeHeaderLen)))
	f.Add([]byte("STPR"))
	// Edges: nothing, one byte short, kinds just outside the range, the
	// largest numbers, a payload after the header.
	good := (&probe{kind: kindEcho, seq: 7, t1: 1}).encode(make([]byte, probeHeaderLen))
	f.Add([]byte{})
	f.Add(good[:probeHeaderLen-1])
	for _, k := range []probeKind{0, kindFlood + 1, 255} {
		b := bytes.Clone(good)
		b[4] = byte(k)
		f.Add(b)
	}
	f.Add((&probe{kind: kindFlood, session: math.MaxUint64, seq: math.MaxUint64, t1: math.MaxInt64, t2: math.MinInt64, t3: -1}).encode(make([]byte, probeHeaderLen)))
	f.Add(append(bytes.Clone(good), bytes.Repeat([]byte{0xff}, 64)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeProbe(b)
		if err != nil {
			return
		}
		again, err := decodeProbe(p.encode(make([]byte, probeHeaderLen)))
		if err != nil || again != p {
			t.Fatalf("round trip of %+v: %+v, %v", p, again, err)
		}
	})
}

// link is an emulated link between two fresh namespaces, carried by a
// `strait lab emulate` process, as the lab builder sets it up.
type link struct {
	bin          string
	nsA, nsB     string
	addrA, addrB netip.Addr
}

func startLink(t *testing.T, ab, ba emulation.Params) link {
	t.Helper()
	testenv.RequireRoot(t)
	l := link{
		bin:   testenv.StraitBinary(t),
		nsA:   testenv.Netns(t, testenv.UniqueName("stt-emu-")),
		nsB:   testenv.Netns(t, testenv.UniqueName("stt-emu-")),
		addrA: netip.MustParseAddr("10.99.0.0"),
		addrB: netip.MustParseAddr("10.99.0.1"),
	}
	dir := t.TempDir()
	cfg := emulator.Config{
		Links:     []emulator.Link{{Name: "test", A: emulator.Endpoint{Netns: l.nsA, Device: "emu-a"}, B: emulator.Endpoint{Netns: l.nsB, Device: "emu-b"}, AtoB: ab, BtoA: ba}},
		Seed:      1,
		ReadyFile: filepath.Join(dir, "ready"),
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "emu.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := testenv.Start(t, l.bin, "lab", "emulate", "--config", path)
	t.Cleanup(func() {
		// Before testenv's kill: SIGTERM makes the emulator log its
		// counters, which testenv prints if the test failed.
		if t.Failed() {
			for _, ns := range []string{l.nsA, l.nsB} {
				out, _ := exec.Command("ip", "-n", ns, "-s", "link").CombinedOutput()
				t.Logf("ip -n %s -s link:\n%s", ns, out)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
	})
	// The deadline only bounds a hung start (a busy host may take seconds).
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(cfg.ReadyFile); err == nil {
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatal("emulator did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range []struct {
		ns, dev string
		addr    netip.Addr
	}{{l.nsA, "emu-a", l.addrA}, {l.nsB, "emu-b", l.addrB}} {
		testenv.Run(t, "ip", "-n", e.ns, "addr", "add", e.addr.String()+"/31", "dev", e.dev)
		testenv.Run(t, "ip", "-n", e.ns, "link", "set", e.dev, "up")
	}
	return l
}

func (l link) config(ab, ba emulation.Params) Config {
	return Config{Binary: l.bin, ClientNetns: l.nsA, ServerNetns: l.nsB, ServerAddr: l.addrB, AtoB: ab, BtoA: ba}
}

// withServer runs f with a probe server in B.
func withServer(t *testing.T, cfg Config, f func()) {
	t.Helper()
	cfg = cfg.withDefaults()
	stop, err := startServer(t.Context(), cfg, netip.AddrPortFrom(netip.IPv4Unspecified(), cfg.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	f()
}

func TestProbeRTT(t *testing.T) {
	for _, dist := range []emulation.Distribution{emulation.Uniform, emulation.Normal, emulation.Pareto} {
		t.Run(string(dist), func(t *testing.T) {
			p := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Distribution: dist}
			l := startLink(t, p, p)
			cfg := l.config(p, p)
			gap := max(spread(p), time.Millisecond) + 200*time.Microsecond
			withServer(t, cfg, func() {
				var r RTTReport
				if err := runClient(t.Context(), cfg.withDefaults(), &r, "--test", "rtt", "--count", "300",
					"--interval", gap.String(), "--drain", "500ms"); err != nil {
					t.Fatal(err)
				}
				res := Result{AtoB: p, BtoA: p, RTT: r}
				for _, c := range res.Checks() {
					t.Logf("%-18s target %-10s measured %-12s %s", c.Name, c.Target, c.Measured, map[bool]string{true: "PASS", false: "FAIL"}[c.Pass])
				}
				if len(r.Samples) != 300 {
					t.Fatalf("%d of 300 probes returned", len(r.Samples))
				}
				// Asserted: one-way delays can be late (a busy machine)
				// but never below the smallest delay the link adds.
				least := p.Delay - p.Jitter
				if tab := dist.Table(); tab != nil {
					least = p.Delay + time.Duration(float64(p.Jitter)*float64(slices.Min(tab))/emulation.DistScale)
				}
				for _, s := range r.Samples {
					if s.Fwd < int64(least) || s.Rev < int64(least) {
						t.Fatalf("probe %d: one-way delays %v and %v below the minimum %v", s.Seq, time.Duration(s.Fwd), time.Duration(s.Rev), least)
					}
				}
			})
		})
	}
}

func TestLossAccuracy(t *testing.T) {
	// A queue deep enough that a writer stalled by a busy machine delays
	// packets instead of dropping them at the limit: this test is about
	// the random loss model, not about overload.
	p := emulation.Params{Delay: time.Millisecond, Loss: 1, Limit: 200000}
	l := startLink(t, p, p)
	cfg := l.config(p, p)
	withServer(t, cfg, func() {
		// The kernel queues a sender's packets on its TUN device until the
		// emulator reads them (4000 packets): a busy machine that stalls
		// the emulator for 0.1 s at 40000 packets/s overflows it, and those
		// packets never meet the loss model (seen: 6835 of 100000 on a
		// loaded CI host). So are packets the receiving device drops after
		// the model passed them.
		before := [2]devDrops{tunDrops(t, l.nsA, "emu-a"), tunDrops(t, l.nsB, "emu-b")}
		var r LossReport
		if err := runClient(t.Context(), cfg.withDefaults(), &r, "--test", "loss", "--count", "100000", "--pps", "40000", "--size", "48", "--drain", "500ms"); err != nil {
			t.Fatal(err)
		}
		after := [2]devDrops{tunDrops(t, l.nsA, "emu-a"), tunDrops(t, l.nsB, "emu-b")}
		a, b := after[0].minus(before[0]), after[1].minus(before[1])
		for _, d := range []struct {
			name     string
			f        Flood
			from, to devDrops
		}{{"a-to-b", r.AtoB, a, b}, {"b-to-a", r.BtoA, b, a}} {
			socket := d.f.RcvbufErrors - d.f.RcvbufBefore
			in := d.f.Sent - d.from.tx             // reached the emulator
			out := d.f.Received + socket + d.to.rx // left it
			lost := in - min(in, out)
			lo, hi := wilson(lost, in)
			t.Logf("%s: the model dropped %d of %d = %.3f%% (95%% CI %.3f–%.3f%%); not counted: %d sent, %d before the emulator, %d host socket and %d device drops after it",
				d.name, lost, in, 100*float64(lost)/float64(max(in, 1)), 100*lo, 100*hi, d.f.Sent, d.from.tx, socket, d.to.rx)
			if in < d.f.Sent/2 {
				t.Errorf("%s: only %d of %d packets reached the emulator: too few to judge the loss model", d.name, in, d.f.Sent)
				continue
			}
			// A 99.9 % interval, so a correct link fails one run in a
			// thousand rather than one in twenty.
			lo, hi = wilsonZ(lost, in, 3.29)
			if p.Loss/100 < lo || p.Loss/100 > hi {
				t.Errorf("%s: 1%% outside the 99.9%% interval %.3f–%.3f%%", d.name, 100*lo, 100*hi)
			}
		}
	})
}

// devDrops are a device's kernel drop counters.
type devDrops struct{ tx, rx uint64 }

func (d devDrops) minus(e devDrops) devDrops { return devDrops{d.tx - e.tx, d.rx - e.rx} }

// tunDrops reads dev's drop counters in netns.
func tunDrops(t *testing.T, netns, dev string) devDrops {
	t.Helper()
	out := testenv.Run(t, "ip", "-n", netns, "-j", "-s", "link", "show", "dev", dev)
	var links []struct {
		Stats struct {
			RX struct{ Dropped uint64 } `json:"rx"`
			TX struct{ Dropped uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j -s link show dev %s in %s: %v: %s", dev, netns, err, out)
	}
	return devDrops{tx: links[0].Stats.TX.Dropped, rx: links[0].Stats.RX.Dropped}
}

func TestBulkIntegrity(t *testing.T) {
	p := emulation.Params{Delay: 2 * time.Millisecond, Loss: 0.5, Rate: 200e6}
	l := startLink(t, p, p)
	cfg := l.config(p, p)
	withServer(t, cfg, func() {
		var r BulkReport
		if err := runClient(t.Context(), cfg.withDefaults(), &r, "--test", "bulk-up", "--duration", "3s", "--verify", "--cc", "bbr"); err != nil {
			t.Fatal(err)
		}
		t.Logf("sent %d bytes through 0.5%% loss at %.1f Mbit/s, %d retransmits, digests equal: %v", r.Bytes, r.goodput()/1e6, r.Retransmits, r.SHA256Match != nil && *r.SHA256Match)
		if r.SHA256Match == nil || !*r.SHA256Match {
			t.Fatal("SHA-256 of the bytes received differs from the bytes sent")
		}
		if r.Retransmits == 0 {
			t.Error("no retransmissions through a lossy link: loss is not real")
		}
	})
}

// TestRunEndToEnd measures the reference link and prints the table.
// Only integrity and loss are asserted: timing and throughput depend on how
// busy this shared machine is, and are judged by the PASS/FAIL column.
func TestRunEndToEnd(t *testing.T) {
	p, err := emulation.ParseFlag("delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit")
	if err != nil {
		t.Fatal(err)
	}
	l := startLink(t, p, p)
	cfg := l.config(p, p)
	cfg.Bulk = 4 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	res.Table(&buf)
	t.Logf("\n%s", buf.String())
	if len(res.ProbeErrors) > 0 {
		t.Fatalf("measurements failed: %v", res.ProbeErrors)
	}
	if len(res.RTT.Samples) < res.Probes*99/100 {
		t.Errorf("only %d of %d probes returned", len(res.RTT.Samples), res.Probes)
	}
	for _, c := range res.Checks() {
		if strings.HasSuffix(c.Name, " loss") && !c.Pass {
			// Loss is decided by a seeded generator in the emulator; a
			// 95 % interval still misses now and then, so log loudly
			// rather than fail.
			t.Logf("NOTE: %s outside its 95%% interval: %s (%s)", c.Name, c.Measured, c.Tolerance)
		}
	}
}
