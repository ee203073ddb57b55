package emulator

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// TestLossProgramArithmetic feeds the kernel loss program chosen random
// values (through the packet's mark, see newKernelLoss) and checks that it
// drops exactly the packets the userspace shaper's arithmetic drops, with
// and without correlation, and at the edges (0 %, 100 %). It also checks
// the counters and that a segmentation offload packet is counted as
// unsplit.
func TestLossProgramArithmetic(t *testing.T) {
	testenv.RequireRoot(t)
	for _, p := range []emulation.Params{
		{Loss: 1},
		{Loss: 30},
		{Loss: 30, LossCorrelation: 25},
		{Loss: 5, LossCorrelation: 99.9},
		{Loss: 100, LossCorrelation: 100},
		{Loss: 0.0001},
	} {
		t.Run(p.String(), func(t *testing.T) {
			k, err := newKernelLoss(p, true)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			last := uint32(binary.NativeEndian.Uint64(k.mem[0:8]))
			loss, rho := percentU32(p.Loss), percentU32(p.LossCorrelation)
			rng := rand.New(rand.NewPCG(3, uint64(loss)))
			// An Ethernet frame: the test run takes the protocol from
			// its type, and the program draws for IP packets only.
			pkt := make([]byte, 64)
			arp := make([]byte, 64)
			binary.BigEndian.PutUint16(pkt[12:], unix.ETH_P_IP)
			binary.BigEndian.PutUint16(arp[12:], unix.ETH_P_ARP)
			const n = 2000
			var drops uint64
			for i := range n {
				v := rng.Uint32()
				if i%7 == 0 {
					// Values at the threshold and the extremes.
					v = [...]uint32{0, loss, loss + 1, math.MaxUint32}[i/7%4]
				}
				ctx := make([]byte, 192) // struct __sk_buff
				binary.NativeEndian.PutUint32(ctx[8:], v)
				segs := uint32(1)
				if i == 5 {
					segs = 4
				}
				binary.NativeEndian.PutUint32(ctx[skbGSOSegs:], segs)
				if i%100 == 50 {
					ret, err := k.prog.Run(&ebpf.RunOptions{Data: arp, Context: ctx})
					if err != nil || ret != uint32(1<<32+tcxNext) {
						t.Fatalf("an ARP packet: returned %d, %v; want TCX_NEXT", ret, err)
					}
				}
				ret, err := k.prog.Run(&ebpf.RunOptions{Data: pkt, Context: ctx})
				if err != nil {
					t.Fatal(err)
				}
				want := loss != 0 && loss >= correlate(v, rho, &last)
				if got := ret == tcxDrop; got != want {
					t.Fatalf("value %d (#%d): dropped %v, the shaper's arithmetic says %v", v, i, got, want)
				}
				if ret != tcxDrop && ret != uint32(1<<32+tcxNext) {
					t.Fatalf("value %d: returned %d, want TCX_NEXT or TCX_DROP", v, ret)
				}
				if want {
					drops++
				}
			}
			c := k.Counts()
			if c != (LossCounts{Seen: n, Dropped: drops, Unsplit: 1}) {
				t.Errorf("counts %+v, want seen %d dropped %d unsplit 1", c, n, drops)
			}
		})
	}
}

func TestAttachLossRefusesDelay(t *testing.T) {
	// A device that does not exist: were the checks to regress, nothing
	// would be attached to a device of the host.
	for _, p := range []emulation.Params{{Delay: time.Millisecond, Loss: 1}, {Jitter: time.Millisecond, Loss: 1}, {Rate: 1e6}, {Loss: math.NaN()}, {Loss: 150}} {
		if _, err := AttachLoss("", "strait-absent0", p); err == nil {
			t.Errorf("AttachLoss(%v) = nil error, want one: only undelayed, lossy directions", p)
		}
	}
}

// TestKernelLossDrops sends UDP probes through a veth pair whose receiving
// end drops 20 % of A's packets (AttachLoss), from a process in one
// namespace to an echo server in the other, and counts what comes back:
// the share lost must match the setting (bounds of seven standard
// deviations of the binomial, so the test does not flake), the program's
// drops must account for every probe lost (the way back is clean), and
// nothing may arrive unsplit.
func TestKernelLossDrops(t *testing.T) {
	nsA, nsB := vethPair(t, "stt-emuloss-", "la", "lb", "10.6.0")
	testenv.Run(t, "ip", "netns", "exec", nsA, "ethtool", "-K", "la", "tso", "off", "gso", "off", "tx-udp-segmentation", "off")
	const pct = 20.0
	k, err := AttachLoss(nsB, "lb", emulation.Params{Loss: pct})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	startProbeServer(t, nsB)
	// Probes sent before the server is bound would be lost without the
	// program's doing.
	waitUDPBound(t, nsB, probePort)
	const n = 2000
	cl := probeCommand(t, nsA, "client", "STRAIT_EMU_PROBE_TARGETS=10.6.0.2",
		"STRAIT_EMU_PROBE_COUNT="+strconv.Itoa(n), "STRAIT_EMU_PROBE_INTERVAL=1ms")
	var stderr strings.Builder
	cl.Stderr = &stderr
	out, err := cl.Output()
	if err != nil {
		t.Fatalf("probe client: %v: %s", err, stderr.String())
	}
	back := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.HasPrefix(line, "sent ") {
			back++
		}
	}
	c := k.Counts()
	lost := uint64(n - back)
	t.Logf("%d probes, %d back; the program saw %d, dropped %d, %d unsplit", n, back, c.Seen, c.Dropped, c.Unsplit)
	sd := math.Sqrt(n * pct / 100 * (1 - pct/100))
	if d := math.Abs(float64(c.Dropped) - n*pct/100); d > 7*sd {
		t.Errorf("the program dropped %d of %d probes (%.1f %%), want %v %% within %.0f probes", c.Dropped, n, 100*float64(c.Dropped)/n, pct, 7*sd)
	}
	// Every probe reached the program, nothing else IP did (IPv6 is
	// off), and the probes it let through came back: a reply that came
	// more than a second after the last probe (a host stalled that long)
	// is the only other way to lose one, so a few are allowed.
	if c.Seen != n || lost < c.Dropped || lost > c.Dropped+n/200 {
		t.Errorf("the program saw %d and dropped %d of %d probes, %d were lost: probes were lost elsewhere or not seen", c.Seen, c.Dropped, n, lost)
	}
	if c.Unsplit != 0 {
		t.Errorf("%d packets reached the program unsplit", c.Unsplit)
	}
}

// waitUDPBound waits until a UDP socket is bound to port in netns.
func waitUDPBound(t *testing.T, netns string, port int) {
	t.Helper()
	want := ":" + strconv.Itoa(port) + " "
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, err := exec.Command("ip", "netns", "exec", netns, "ss", "-Hnlu").Output()
		if err == nil && strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no UDP socket on port %d in %s after 30s: %s", port, netns, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ProbeTCX finds tcx in a fresh namespace and leaves no program on its
// loopback device; it fails, naming tcx, in a namespace that does not
// exist.
func TestProbeTCX(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.Netns(t, testenv.UniqueName("stt-tcx-"))
	if err := ProbeTCX(ns); err != nil {
		t.Fatalf("ProbeTCX: %v", err)
	}
	if got := tcxPrograms(t, ns, "lo", ebpf.AttachTCXIngress); len(got) > 0 {
		t.Errorf("after the probe, lo ingress has %v", got)
	}
	if err := ProbeTCX("stt-no-such-netns"); err == nil {
		t.Error("ProbeTCX in a namespace that does not exist: no error")
	}
}
