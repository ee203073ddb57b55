package emulator

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// The delay probe: a UDP ping-pong between two processes in two network
// namespaces that are joined by a plain veth pair and by emulated links,
// one per delay setting. The client sends one probe every interval, to each
// path in turn, so every path sees the same host; each probe carries four
// CLOCK_MONOTONIC stamps (client send, server receive, server send, client
// receive), which all namespaces share, so the two one-way delays are
// measured apart. A path's excess per direction is its one-way delay minus
// the veth's (same direction, same statistic) minus its delay setting.
//
// The processes are this test binary started with `ip netns exec` (see
// probeRole); the emulator runs in the test process on the package's own
// devices, so that a probeTap can also see when the emulator read and wrote
// each probe.

const (
	probeRoleEnv = "STRAIT_EMU_PROBE_ROLE"
	probePort    = 7171
	probeMagic   = 0x73747270 // "strp"
	probeLen     = 48         // magic, path, seq, t0, t1, t2, filler
	probeSeed    = 42         // the probe lab's engine seed
	probeRcvBuf  = 8 << 20    // the probe sockets' receive buffers, bytes
)

// probeRole runs the server or client process of the delay probe when the
// test binary was started as one, and reports whether it was.
func probeRole() bool {
	switch os.Getenv(probeRoleEnv) {
	case "":
		return false
	case "server":
		if err := probeServe(); err != nil {
			fmt.Fprintln(os.Stderr, "probe server:", err)
			os.Exit(1)
		}
	case "sink":
		if err := bulkSink(); err != nil {
			fmt.Fprintln(os.Stderr, "bulk sink:", err)
			os.Exit(1)
		}
	case "source":
		if err := bulkSource(); err != nil {
			fmt.Fprintln(os.Stderr, "bulk source:", err)
			os.Exit(1)
		}
	case "client":
		if err := probeClient(); err != nil {
			fmt.Fprintln(os.Stderr, "probe client:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "%s: want server or client\n", probeRoleEnv)
		os.Exit(2)
	}
	os.Exit(0)
	return true
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// probeServe echoes probes with its receive and send stamps filled in. It
// uses blocking system calls on one thread: no netpoller between the
// kernel and the stamps.
func probeServe() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// Room for seconds of probes, so a stalled process does not lose
	// what the links delivered (root may exceed rmem_max).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, probeRcvBuf)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: probePort}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		t1 := monoNow()
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return err
		}
		if n < probeLen || binary.BigEndian.Uint32(buf) != probeMagic {
			continue
		}
		binary.BigEndian.PutUint64(buf[24:], uint64(t1))
		binary.BigEndian.PutUint64(buf[32:], uint64(monoNow()))
		_ = unix.Sendto(fd, buf[:n], 0, from)
	}
}

// probeClient sends STRAIT_EMU_PROBE_COUNT probes, one every
// STRAIT_EMU_PROBE_INTERVAL, to the servers listed in
// STRAIT_EMU_PROBE_TARGETS in turn, and prints one line per probe that came
// back: path seq t0 t1 t2 t3.
func probeClient() error {
	var targets []netip.Addr
	for _, s := range strings.Split(os.Getenv("STRAIT_EMU_PROBE_TARGETS"), ",") {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return fmt.Errorf("STRAIT_EMU_PROBE_TARGETS: %q is not an IPv4 address", s)
		}
		targets = append(targets, a)
	}
	count, err := strconv.Atoi(os.Getenv("STRAIT_EMU_PROBE_COUNT"))
	if err != nil || count < 1 {
		return fmt.Errorf("STRAIT_EMU_PROBE_COUNT: %q is not a positive number", os.Getenv("STRAIT_EMU_PROBE_COUNT"))
	}
	interval, err := time.ParseDuration(os.Getenv("STRAIT_EMU_PROBE_INTERVAL"))
	if err != nil || interval <= 0 {
		return fmt.Errorf("STRAIT_EMU_PROBE_INTERVAL: %q is not a positive duration", os.Getenv("STRAIT_EMU_PROBE_INTERVAL"))
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// The receiver ends after a second without replies once all are sent.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, probeRcvBuf)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	var sent sync.WaitGroup
	sent.Add(1)
	done := make(chan struct{})
	wg.Go(func() {
		buf := make([]byte, 2048)
		got := 0
		for got < count {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			t3 := monoNow()
			if err == unix.EAGAIN {
				select {
				case <-done:
					return
				default:
					continue
				}
			}
			if err != nil || n < probeLen || binary.BigEndian.Uint32(buf) != probeMagic {
				continue
			}
			got++
			fmt.Fprintf(out, "%d %d %d %d %d %d\n", binary.BigEndian.Uint32(buf[4:]), binary.BigEndian.Uint64(buf[8:]),
				binary.BigEndian.Uint64(buf[16:]), binary.BigEndian.Uint64(buf[24:]), binary.BigEndian.Uint64(buf[32:]), t3)
		}
	})
	// The gaps are drawn uniformly from half to one and a half intervals
	// (same mean), unless STRAIT_EMU_PROBE_GRID is set: on a fixed grid,
	// a path whose delay puts its deliveries near the client's next sends
	// meets them every time, and a delivery within 100 µs of a send took
	// 4-67 µs longer at the median to reach its receiver (see
	// docs/topology.md, "Accuracy"): the probe's doing, not the link's.
	spread := os.Getenv("STRAIT_EMU_PROBE_GRID") == ""
	rng := rand.New(rand.NewPCG(7, 7))
	pkt := make([]byte, probeLen)
	binary.BigEndian.PutUint32(pkt, probeMagic)
	sentAt := make([]int64, count)
	// The sends keep their schedule better on a thread of their own that
	// sleeps in clock_nanosleep with 1 ns of timer slack than with
	// time.Sleep, which rounds sub-millisecond sleeps up: the schedule
	// then caught up in bursts, 17-23 % of the probes sent within 100 µs
	// of the one before at load 1-10.
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	next := monoNow()
	for i := range count {
		path := i % len(targets)
		binary.BigEndian.PutUint32(pkt[4:], uint32(path))
		binary.BigEndian.PutUint64(pkt[8:], uint64(i))
		binary.BigEndian.PutUint64(pkt[16:], uint64(monoNow()))
		to := &unix.SockaddrInet4{Port: probePort, Addr: targets[path].As4()}
		if err := unix.Sendto(fd, pkt, 0, to); err != nil {
			return fmt.Errorf("send to %v: %w", targets[path], err)
		}
		sentAt[i] = monoNow()
		gap := interval
		if spread {
			gap = interval/2 + time.Duration(rng.Int64N(int64(interval)))
		}
		next += int64(gap)
		if now := monoNow(); spread && next < now+int64(interval/2) {
			// Late (the host stalled the client): start again from now
			// rather than catch up with a burst, whose probes would meet
			// each other on the way.
			next = now + int64(interval/2)
		}
		ts := unix.NsecToTimespec(next)
		for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
		}
	}
	close(done)
	wg.Wait()
	for i, t := range sentAt {
		fmt.Fprintf(out, "sent %d %d\n", i, t)
	}
	return out.Flush()
}

// probeSample is one probe that came back, stamps in ns of CLOCK_MONOTONIC.
type probeSample struct {
	path           int
	seq            uint64
	t0, t1, t2, t3 int64
}

func (s probeSample) fwd() int64 { return s.t1 - s.t0 }
func (s probeSample) rev() int64 { return s.t3 - s.t2 }

// probeLab is two namespaces joined by a veth pair (path 0) and by one
// emulated link per setting (path i+1 for settings[i]), the same
// settings both ways. The links whose noLead is true hand packets over at
// their release, without the writer's lead (see writeLead): the emulator
// before the lead, measured side by side with the one after.
//
// A setting that is undelayed but impaired (loss, rate) is carried as the
// lab carries it (see lab.BackendKernel): a veth pair with the loss program
// on each receiving end (AttachLoss) and a tbf for a rate, no emulator.
type probeLab struct {
	nsA, nsB string
	targets  []string // server address per path
	pumps    []*pump  // per setting: a-to-b, b-to-a; nil for a kernel-carried one
	// stream is, per setting, the engine's random stream of its a-to-b
	// direction (the link's index in the engine, doubled; see newEngine).
	stream []uint64
	kernel [][2]*KernelLoss // per setting: the loss programs receiving from A, from B (nil: none)
	tap    *probeTap
	sentAt map[uint64]int64 // per probe, when the client's sendto returned
	stop   func()
	now    clock // the engines' clock, whose epoch the tap knows
}

func newProbeLab(t *testing.T, settings []emulation.Params, noLead []bool) *probeLab {
	t.Helper()
	l := &probeLab{tap: newProbeTap()}
	l.nsA, l.nsB = vethPair(t, "stt-emudelay-", "va", "vb", "10.9.0")
	l.targets = []string{"10.9.0.2"}

	var drains sync.WaitGroup
	var devs []Device
	var links []Link
	var pairs [][2]Device
	l.pumps = make([]*pump, 2*len(settings))
	l.stream = make([]uint64, len(settings))
	l.kernel = make([][2]*KernelLoss, len(settings))
	t.Cleanup(func() {
		for _, k := range l.kernel {
			for _, kl := range k {
				if kl != nil {
					kl.Close()
				}
			}
		}
	})
	var userspace []int // settings the engine carries, in its link order
	for i, p := range settings {
		if !p.IsZero() && p.Undelayed() {
			l.kernelPath(t, i, p)
			continue
		}
		l.stream[i] = uint64(2 * len(links))
		userspace = append(userspace, i)
		var pair [2]Device
		for j, ns := range []string{l.nsA, l.nsB} {
			name := fmt.Sprintf("e%d%c", i, "ab"[j])
			d, err := createTUN(ns, name, DefaultMTU, &drains)
			if err != nil {
				for _, d := range devs {
					d.Close()
				}
				t.Fatalf("create %s in %s: %v", name, ns, err)
			}
			devs = append(devs, d)
			pair[j] = &tapDevice{Device: d, tap: l.tap, dir: j, noLead: i < len(noLead) && noLead[i]}
			testenv.Run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("10.7.%d.%d/31", i, j), "dev", name)
			testenv.Run(t, "ip", "-n", ns, "link", "set", name, "up")
		}
		pairs = append(pairs, pair)
		links = append(links, Link{Name: fmt.Sprint(i), AtoB: p, BtoA: p})
		l.targets = append(l.targets, fmt.Sprintf("10.7.%d.1", i))
	}
	epoch := time.Now()
	l.tap.setClock(epoch)
	now := func() int64 { return int64(time.Since(epoch)) }
	l.now = now
	e, err := newEngine(Config{Links: links}, pairs, probeSeed, now)
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range userspace {
		for d := range 2 {
			p := e.pumps[2*k+d]
			p.trace = l.tap.record(d)
			l.pumps[2*i+d] = p
		}
	}
	l.stop = start(e, devs, &drains)
	t.Cleanup(l.stop)

	startProbeServer(t, l.nsB)
	return l
}

// oneWayPath joins the namespaces by one more link, delayed p from A to B
// and undelayed from B to A, carried by a detour on a veth pair (split, as
// the lab's split backend carries it) or by a pair of TUN devices (as the
// userspace backend does), on an engine of its own that stops with the
// lab. It returns the path's index among the targets and its pumps
// (a-to-b, b-to-a; the detour has no b-to-a pump: the kernel carries it).
func (l *probeLab) oneWayPath(t *testing.T, i int, p emulation.Params, split bool) (path int, pumps [2]*pump) {
	t.Helper()
	link := Link{Name: fmt.Sprint("oneway", i), AtoB: p, Veth: split}
	var pair [2]Device
	var devs []Device
	var drains sync.WaitGroup
	prefix := "o"
	if split {
		prefix = "s"
	}
	a, b := fmt.Sprintf("%s%da", prefix, i), fmt.Sprintf("%s%db", prefix, i)
	link.A, link.B = Endpoint{Netns: l.nsA, Device: a}, Endpoint{Netns: l.nsB, Device: b}
	subnet := 5
	if !split {
		subnet = 6
	}
	if split {
		testenv.Run(t, "ip", "-n", l.nsA, "link", "add", a, "type", "veth", "peer", "name", b, "netns", l.nsB)
		d, err := createDetour(link.A, link.B, DefaultMTU)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
		td := &tapDevice{Device: d, tap: l.tap, dir: 0, oneWay: true}
		pair = [2]Device{td, td}
	} else {
		for j, ep := range []Endpoint{link.A, link.B} {
			d, err := createTUN(ep.Netns, ep.Device, DefaultMTU, &drains)
			if err != nil {
				for _, d := range devs {
					d.Close()
				}
				t.Fatal(err)
			}
			devs = append(devs, d)
			pair[j] = &tapDevice{Device: d, tap: l.tap, dir: j}
		}
	}
	for j, ep := range []Endpoint{link.A, link.B} {
		testenv.Run(t, "ip", "-n", ep.Netns, "addr", "add", fmt.Sprintf("10.%d.%d.%d/31", subnet, i, j), "dev", ep.Device)
		testenv.Run(t, "ip", "-n", ep.Netns, "link", "set", ep.Device, "up")
	}
	e, err := newEngine(Config{Links: []Link{link}}, [][2]Device{pair}, probeSeed, l.now)
	if err != nil {
		t.Fatal(err)
	}
	for k, p := range e.pumps {
		pumps[e.of[k].dir] = p
		p.trace = l.tap.record(e.of[k].dir)
	}
	stop := start(e, devs, &drains)
	t.Cleanup(stop)
	prev := l.stop
	l.stop = func() { prev(); stop() }
	l.targets = append(l.targets, fmt.Sprintf("10.%d.%d.1", subnet, i))
	return len(l.targets) - 1, pumps
}

// start runs engine e and returns the function that stops it, once:
// the engine, then its devices, then the goroutines draining them.
func start(e *engine, devs []Device, drains *sync.WaitGroup) func() {
	var wg sync.WaitGroup
	wg.Go(e.run)
	var once sync.Once
	return func() {
		once.Do(func() {
			e.stop()
			for _, d := range devs {
				d.Close()
			}
			wg.Wait()
			drains.Wait()
		})
	}
}

// probeCommand runs this test binary in network namespace ns in one of
// the probe's roles (TestMain), with env added to the environment.
func probeCommand(t *testing.T, ns, role string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(append(os.Environ(), probeRoleEnv+"="+role), env...)
	return cmd
}

// startProbeServer runs the probe's echo server in network namespace ns
// until the test ends.
func startProbeServer(t *testing.T, ns string) {
	t.Helper()
	srv := probeCommand(t, ns, "server")
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	})
}

// kernelPath joins the namespaces by a veth pair carrying setting i (path
// i+1) the way the lab carries an undelayed link: segmentation off on the
// sending ends, a tbf there for a rate, the loss program on the receiving
// ends.
func (l *probeLab) kernelPath(t *testing.T, i int, p emulation.Params) {
	t.Helper()
	a, b := fmt.Sprintf("k%da", i), fmt.Sprintf("k%db", i)
	testenv.Run(t, "ip", "-n", l.nsA, "link", "add", a, "type", "veth", "peer", "name", b, "netns", l.nsB)
	for j, end := range []struct{ ns, dev string }{{l.nsA, a}, {l.nsB, b}} {
		testenv.Run(t, "ip", "-n", end.ns, "addr", "add", fmt.Sprintf("10.7.%d.%d/31", i, j), "dev", end.dev)
		testenv.Run(t, "ip", "-n", end.ns, "link", "set", end.dev, "up")
		if p.Rate != 0 {
			testenv.Run(t, "tc", append([]string{"-n", end.ns, "qdisc", "add", "dev", end.dev, "root", "tbf"}, p.TBFArgs()...)...)
		}
		if p.Loss > 0 {
			testenv.Run(t, "ip", "netns", "exec", end.ns, "ethtool", "-K", end.dev, "tso", "off", "gso", "off", "tx-udp-segmentation", "off")
		}
	}
	if p.Loss > 0 {
		for j, end := range []struct{ ns, dev string }{{l.nsB, b}, {l.nsA, a}} {
			k, err := AttachLoss(end.ns, end.dev, p)
			if err != nil {
				t.Fatal(err)
			}
			l.kernel[i][j] = k
		}
	}
	l.targets = append(l.targets, fmt.Sprintf("10.7.%d.1", i))
}

// run sends count probes, interval apart, round robin over the paths, and
// returns the ones that came back per path.
func (l *probeLab) run(t *testing.T, count int, interval time.Duration) [][]probeSample {
	t.Helper()
	cl := probeCommand(t, l.nsA, "client",
		"STRAIT_EMU_PROBE_TARGETS="+strings.Join(l.targets, ","),
		"STRAIT_EMU_PROBE_COUNT="+strconv.Itoa(count),
		"STRAIT_EMU_PROBE_INTERVAL="+interval.String())
	var stderr strings.Builder
	cl.Stderr = &stderr
	out, err := cl.Output()
	if err != nil {
		t.Fatalf("probe client: %v: %s", err, stderr.String())
	}
	res := make([][]probeSample, len(l.targets))
	l.sentAt = map[uint64]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "sent ") {
			var seq uint64
			var at int64
			fmt.Sscan(line[5:], &seq, &at)
			l.sentAt[seq] = at
			continue
		}
		var s probeSample
		if _, err := fmt.Sscan(line, &s.path, &s.seq, &s.t0, &s.t1, &s.t2, &s.t3); err != nil || s.path >= len(res) {
			t.Fatalf("probe client printed %q", line)
		}
		res[s.path] = append(res[s.path], s)
	}
	return res
}

// probeTap records, per probe and direction, when the emulator read it
// from a device and when it started and finished writing it, in
// CLOCK_MONOTONIC ns, so the probe's one-way delay can be split into its
// way into the emulator, the time held, and its way out.
type probeTap struct {
	off int64 // CLOCK_MONOTONIC minus the engine's clock
	mu  sync.Mutex
	at  map[tapKey]*tapStamps
}

type tapKey struct {
	dir int // 0: read from A (a-to-b), 1: read from B
	seq uint64
}

// tapStamps: read when the reader was awake to read it, write and
// written around the Write (by the tap), and what the engine traced (see
// pump.trace), all CLOCK_MONOTONIC.
type tapStamps struct {
	read, write, written int64
	tr                   traced
}

// record returns a pump trace that keeps what the engine knew of each
// probe it wrote in direction dir.
func (p *probeTap) record(dir int) func([]byte, traced) {
	return func(pkt []byte, t traced) {
		seq, ok := probeSeq(pkt)
		if !ok {
			return
		}
		if t.entered != 0 {
			t.entered += p.off
		}
		t.arrival += p.off
		t.release += p.off
		t.start += p.off
		t.end += p.off
		if t.woke != 0 {
			t.woke += p.off
			t.aimed += p.off
		}
		p.mu.Lock()
		p.stamps(dir, seq).tr = t
		p.mu.Unlock()
	}
}

func newProbeTap() *probeTap { return &probeTap{at: map[tapKey]*tapStamps{}} }

// setClock sets the offset between CLOCK_MONOTONIC and time.Since(epoch),
// which Go reads from the same clock.
func (p *probeTap) setClock(epoch time.Time) {
	m0 := monoNow()
	e := int64(time.Since(epoch))
	m1 := monoNow()
	p.off = (m0+m1)/2 - e
}

func (p *probeTap) stamps(dir int, seq uint64) *tapStamps {
	k := tapKey{dir, seq}
	s := p.at[k]
	if s == nil {
		s = &tapStamps{}
		p.at[k] = s
	}
	return s
}

// probeSeq returns the sequence number of a probe packet (IPv4, UDP, to or
// from probePort), or false.
func probeSeq(pkt []byte) (uint64, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_UDP {
		return 0, false
	}
	ihl := int(pkt[0]&15) * 4
	u := pkt[ihl:]
	if len(u) < 8+probeLen || (binary.BigEndian.Uint16(u[0:]) != probePort && binary.BigEndian.Uint16(u[2:]) != probePort) {
		return 0, false
	}
	pl := u[8:]
	if binary.BigEndian.Uint32(pl) != probeMagic {
		return 0, false
	}
	return binary.BigEndian.Uint64(pl[8:]), true
}

// tapDevice stamps the probes the engine reads from and writes to a
// device. dir is the direction whose source this device is; noLead hides
// the device's departure stamps, so its writer has no lead.
type tapDevice struct {
	Device
	tap    *probeTap
	dir    int
	noLead bool
	// oneWay says that the device is a detour, which both reads and
	// writes direction dir.
	oneWay bool
}

// linkHeader lets the arrival filter find a detour's IP header as it does
// without the tap.
func (d *tapDevice) linkHeader() int {
	if h, ok := d.Device.(interface{ linkHeader() int }); ok {
		return h.linkHeader()
	}
	return 0
}

// File lets readWaiter wait on the TUN device's descriptor as it does
// without the tap.
func (d *tapDevice) File() *os.File { return d.Device.(interface{ File() *os.File }).File() }

// departures lets the writer date its writes into the TUN device as it
// does without the tap.
func (d *tapDevice) departures() *departures {
	if d.noLead {
		return nil
	}
	return departuresOf(d.Device)
}

func (d *tapDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	t := monoNow() // the reader is awake: poll(2) returned
	n, err := d.Device.Read(bufs, sizes, offset)
	for i := range n {
		if seq, ok := probeSeq(bufs[i][offset : offset+sizes[i]]); ok {
			d.tap.mu.Lock()
			d.tap.stamps(d.dir, seq).read = t
			d.tap.mu.Unlock()
		}
	}
	return n, err
}

func (d *tapDevice) Write(bufs [][]byte, offset int) (int, error) {
	t := monoNow()
	var seqs []uint64
	for _, b := range bufs {
		if seq, ok := probeSeq(b[offset:]); ok {
			seqs = append(seqs, seq)
		}
	}
	n, err := d.Device.Write(bufs, offset)
	t2 := monoNow()
	dir := 1 - d.dir
	if d.oneWay {
		dir = d.dir
	}
	d.tap.mu.Lock()
	for _, seq := range seqs {
		s := d.tap.stamps(dir, seq)
		s.write, s.written = t, t2
	}
	d.tap.mu.Unlock()
	return n, err
}

// probeSplit collects, for one direction of an emulated path, the parts
// of each probe's way (see TestDelayProbeExperiment).
type probeSplit struct {
	in, wake, late, write, lead, up []int64
	// Of the packets handed over more than OnTimeSlack after their aim
	// (tardy) and the others: how their writer had woken (by kind), and
	// how much later than it meant to it woke (wakeLate).
	tardyBy, onTimeBy          [wakeBusy + 1]int
	tardyWakeLate, onWakeLate  []int64
	tardyAfterAim, tardyInSpin int // tardy: woke after the aim; woke before it
	// Timer wake-ups on the CPU that armed the timer and on another one,
	// tardy and on time, and the wake-up past its aim of each.
	sameCPU, otherCPU           [2]int
	sameWakeLate, otherWakeLate []int64
}

func (p *probeSplit) add(ts *tapStamps, send, recv int64) {
	if ts == nil || ts.tr.start == 0 {
		return
	}
	tr := ts.tr
	p.in = append(p.in, tr.arrival-send)
	if ts.read != 0 {
		p.wake = append(p.wake, ts.read-tr.arrival)
	}
	late := tr.start - (tr.release - tr.lead)
	p.late = append(p.late, late)
	if tr.by == wakeTimer && tr.armCPU >= 0 && tr.wakeCPU >= 0 {
		k := 0
		if late > int64(OnTimeSlack) {
			k = 1
		}
		if tr.armCPU == tr.wakeCPU {
			p.sameCPU[k]++
			p.sameWakeLate = append(p.sameWakeLate, tr.woke-tr.aimed)
		} else {
			p.otherCPU[k]++
			p.otherWakeLate = append(p.otherWakeLate, tr.woke-tr.aimed)
		}
	}
	if late > int64(OnTimeSlack) {
		p.tardyBy[tr.by]++
		if tr.woke != 0 {
			p.tardyWakeLate = append(p.tardyWakeLate, tr.woke-tr.aimed)
			if tr.woke > tr.release-tr.lead {
				p.tardyAfterAim++
			} else {
				p.tardyInSpin++
			}
		}
	} else {
		p.onTimeBy[tr.by]++
		if tr.woke != 0 {
			p.onWakeLate = append(p.onWakeLate, tr.woke-tr.aimed)
		}
	}
	p.lead = append(p.lead, tr.lead)
	if tr.entered != 0 {
		p.write = append(p.write, tr.entered-tr.start)
		p.up = append(p.up, recv-tr.entered)
	}
}

func (p *probeSplit) String(vethP50 float64) string {
	m := func(v []int64) float64 { return summarize(v).p50 }
	return fmt.Sprintf("n %d in %.1f wake %.1f late %.1f write %.1f lead %.1f up %.1f; in+up-veth %+.1f",
		len(p.late), m(p.in), m(p.wake), m(p.late), m(p.write), m(p.lead), m(p.up), m(p.in)+m(p.up)-vethP50)
}

// tardiness says how the writer had woken for the packets handed over
// late and for the others: per kind of wake-up (direct, signal, timer,
// nanosleep, poll, busy), and the median of how late past its own aim
// the wake-up came.
func (p *probeSplit) tardiness() string {
	tardy := 0
	for _, n := range p.tardyBy {
		tardy += n
	}
	return fmt.Sprintf("late %d of %d: by direct/signal/timer/nanosleep/poll/busy %v (on time %v); woke after the aim %d, before it (late in the spin or the write's start) %d; wake-up past its aim, median µs: late %.1f, on time %.1f; "+
		"timer wake-ups on the arming CPU on time/late %v (past aim p50 %.1f p90 %.1f), on the other %v (p50 %.1f p90 %.1f)",
		tardy, len(p.late), p.tardyBy, p.onTimeBy, p.tardyAfterAim, p.tardyInSpin, summarize(p.tardyWakeLate).p50, summarize(p.onWakeLate).p50,
		p.sameCPU, summarize(p.sameWakeLate).p50, quantile(p.sameWakeLate, 0.9), p.otherCPU, summarize(p.otherWakeLate).p50, quantile(p.otherWakeLate, 0.9))
}

// quantile is v's q quantile in µs.
func quantile(v []int64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return float64(s[min(int(q*float64(len(s))), len(s)-1)]) / 1e3
}

// dist summarizes ns values: mean, median, 99th percentile, as µs.
type dist struct{ mean, p50, p99 float64 }

func summarize(v []int64) dist {
	if len(v) == 0 {
		return dist{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += float64(x)
	}
	return dist{sum / float64(len(s)) / 1e3, float64(s[len(s)/2]) / 1e3, float64(s[len(s)*99/100]) / 1e3}
}

func (d dist) String() string { return fmt.Sprintf("%7.1f %7.1f %8.1f", d.mean, d.p50, d.p99) }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestDelayProbeExperiment prints, per emulated link setting and
// direction, how much later than plain veth plus the setting a probe
// arrives: the excess mean, median and p99 in µs, where the excess mean is
// the mean of (one-way delay − setting) less the veth's mean one-way delay
// in the same direction, and likewise for the median and p99. With jitter
// the setting is each probe's own draw (see probeSettings). It also
// splits each direction of every emulated path (see probeSplit): the way
// into the device (in), the writer's lateness against its aim (late), the
// Write's way into the receiving stack against the lead (write, lead) and
// the way up to the receiver (up), so an excess can be traced to its part
// and a direction compared with the other. It is an experiment, not a
// unit test: it needs root and STRAIT_EMU_PROBE=1; STRAIT_EMU_PROBE_COUNT
// sets the probes per path (default 2000), one every millisecond on
// average across all paths;
// STRAIT_EMU_PROBE_DELAYS replaces the default settings (0, 0 with 1 %
// loss, 500µs, 3.3ms, 3.3ms±0.4ms, 5ms, 10ms±2ms) with a comma-separated
// list of delay[±jitter][/loss%] (an undelayed setting with loss is
// carried by the kernel, and its probes lost are counted);
// STRAIT_EMU_PROBE_COMPARE=1 adds, per setting, a link whose writer has no
// lead (the emulator before it), probed in the same rounds;
// STRAIT_EMU_PROBE_ONEWAY lists the delays (default 5ms; "none": no such
// links) of links delayed from A to B only, each probed through a detour on
// a veth pair (the lab's split backend) and through a TUN pair;
// the gaps between probes are drawn from half to one and a half
// milliseconds, or are exactly one with STRAIT_EMU_PROBE_GRID=1 (as before);
// STRAIT_EMU_PROBE_DUMP names a file for every probe's stamps.
func TestDelayProbeExperiment(t *testing.T) {
	if os.Getenv("STRAIT_EMU_PROBE") == "" {
		t.Skip("set STRAIT_EMU_PROBE=1 (needs root): measures the emulator's delay accuracy with a UDP ping-pong")
	}
	per := 2000
	if n, err := strconv.Atoi(os.Getenv("STRAIT_EMU_PROBE_COUNT")); err == nil && n > 0 {
		per = n
	}
	ms := func(d float64) time.Duration { return time.Duration(d * float64(time.Millisecond)) }
	// The seeds' scenarios reach 10 ms ± 2 ms per direction (cloud20),
	// whose writer also waits in poll(2) first.
	// The link with 1 % loss and no delay is carried by the kernel (see
	// probeLab), as the lab carries it.
	settings := []emulation.Params{{}, {Loss: 1}, {Delay: ms(0.5)}, {Delay: ms(3.3)}, {Delay: ms(3.3), Jitter: ms(0.4)}, {Delay: ms(5)}, {Delay: ms(10), Jitter: ms(2)}}
	if v := os.Getenv("STRAIT_EMU_PROBE_DELAYS"); v != "" {
		settings = nil
		for _, f := range strings.Split(v, ",") {
			var p emulation.Params
			f, lossPct, lossy := strings.Cut(f, "/")
			if lossy {
				v, err := strconv.ParseFloat(strings.TrimSuffix(lossPct, "%"), 64)
				if err != nil {
					t.Fatalf("STRAIT_EMU_PROBE_DELAYS: loss %q: %v", lossPct, err)
				}
				p.Loss = v
			}
			ds, js, jit := strings.Cut(f, "±")
			d, err := time.ParseDuration(ds)
			if err != nil {
				t.Fatalf("STRAIT_EMU_PROBE_DELAYS: %v", err)
			}
			p.Delay = d
			if jit {
				if p.Jitter, err = time.ParseDuration(js); err != nil {
					t.Fatalf("STRAIT_EMU_PROBE_DELAYS: %v", err)
				}
			}
			settings = append(settings, p)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("STRAIT_EMU_PROBE_PROCS")); err == nil {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	// With STRAIT_EMU_PROBE_COMPARE each setting also gets a link
	// without the writer's lead, probed in the same rounds.
	var noLead []bool
	if os.Getenv("STRAIT_EMU_PROBE_COMPARE") != "" {
		n := len(settings)
		noLead = make([]bool, 2*n)
		for i := range n {
			settings = append(settings, settings[i])
			noLead[n+i] = true
		}
	}
	l := newProbeLab(t, settings, noLead)
	// Links delayed one way only, through the detour and, to compare,
	// through a TUN pair (STRAIT_EMU_PROBE_ONEWAY: delays, comma-separated;
	// "none" leaves them out).
	type oneWay struct {
		p     emulation.Params
		split bool
		path  int
		pumps [2]*pump
	}
	var oneWays []oneWay
	oneWayDelays := "5ms"
	if v := os.Getenv("STRAIT_EMU_PROBE_ONEWAY"); v != "" {
		oneWayDelays = v
	}
	if oneWayDelays != "none" {
		for i, f := range strings.Split(oneWayDelays, ",") {
			d, err := time.ParseDuration(f)
			if err != nil || d <= 0 {
				t.Fatalf("STRAIT_EMU_PROBE_ONEWAY: %q: want a positive delay", f)
			}
			for _, split := range []bool{true, false} {
				o := oneWay{p: emulation.Params{Delay: d}, split: split}
				o.path, o.pumps = l.oneWayPath(t, i, o.p, split)
				oneWays = append(oneWays, o)
			}
		}
	}
	load0 := loadavg()
	res := l.run(t, per*len(l.targets), time.Millisecond)
	load1 := loadavg()
	l.stop()
	if path := os.Getenv("STRAIT_EMU_PROBE_DUMP"); path != "" {
		// One line per probe and direction, CLOCK_MONOTONIC ns (0: not
		// seen): the sender's and receiver's stamps, and for emulated
		// paths the reader's wake-up and what the engine traced.
		var b strings.Builder
		b.WriteString("path seq dir send recv read arrival release lead start entered end woke aimed by\n")
		for _, r := range res {
			for _, s := range r {
				for d, sr := range [][2]int64{{s.t0, s.t1}, {s.t2, s.t3}} {
					var ts tapStamps
					if x := l.tap.at[tapKey{d, s.seq}]; x != nil {
						ts = *x
					}
					fmt.Fprintf(&b, "%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n", s.path, s.seq, d, sr[0], sr[1], ts.read,
						ts.tr.arrival, ts.tr.release, ts.tr.lead, ts.tr.start, ts.tr.entered, ts.tr.end, ts.tr.woke, ts.tr.aimed, ts.tr.by)
				}
			}
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	veth := res[0]
	var vf, vr []int64
	for _, s := range veth {
		vf = append(vf, s.fwd())
		vr = append(vr, s.rev())
	}
	df, dr := summarize(vf), summarize(vr)
	var tab strings.Builder
	schedule := "gaps 0.5-1.5 ms"
	if os.Getenv("STRAIT_EMU_PROBE_GRID") != "" {
		schedule = "every 1 ms"
	}
	fmt.Fprintf(&tab, "load average before %s, after %s; %d probes per path, %s, round robin over %d paths\n", load0, load1, per, schedule, len(l.targets))
	fmt.Fprintf(&tab, "excess = one-way delay - setting - veth one-way delay (same direction, same statistic), µs\n")
	fmt.Fprintf(&tab, "%-30s %-3s %6s %9s %9s %9s %8s %9s %7s\n", "link", "dir", "probes", "mean", "p50", "p99", "on-time", "lead-us", "note")
	fmt.Fprintf(&tab, "%-30s %-3s %6d %9.1f %9.1f %9.1f %8s %9s %7s\n", "veth (one-way)", "fwd", len(veth), df.mean, df.p50, df.p99, "", "", "")
	fmt.Fprintf(&tab, "%-30s %-3s %6d %9.1f %9.1f %9.1f %8s %9s %7s\n", "veth (one-way)", "rev", len(veth), dr.mean, dr.p50, dr.p99, "", "", "")
	var splits, losses []string
	for i, p := range settings {
		got := res[i+1]
		fset, rset, exact := probeSettings(l, i+1, p, l.stream[i], got)
		var f, r []int64
		var sp [2]probeSplit
		for k, s := range got {
			f = append(f, s.fwd()-fset[k])
			r = append(r, s.rev()-rset[k])
			sp[0].add(l.tap.at[tapKey{0, s.seq}], s.t0, s.t1)
			sp[1].add(l.tap.at[tapKey{1, s.seq}], s.t2, s.t3)
		}
		note := ""
		if !exact {
			note = "nominal" // the per-probe draws are unknown
		}
		name := p.Delay.String()
		if p.Jitter != 0 {
			name += "±" + p.Jitter.String()
		}
		if p.Loss != 0 {
			name += " " + emulation.FormatPercent(p.Loss) + " loss"
		}
		if i < len(noLead) && noLead[i] {
			name += " no lead"
		}
		if l.pumps[2*i] == nil {
			for d, v := range [][]int64{f, r} {
				x, base := summarize(v), []dist{df, dr}[d]
				fmt.Fprintf(&tab, "%-30s %-3s %6d %+9.1f %+9.1f %+9.1f %8s %9s %7s\n", "kernel "+name, []string{"fwd", "rev"}[d], len(got),
					x.mean-base.mean, x.p50-base.p50, x.p99-base.p99, "", "", "")
			}
			losses = append(losses, l.lossLine("kernel "+name, i, p, len(got)))
			continue
		}
		for d, v := range [][]int64{f, r} {
			st := l.pumps[2*i+d].c.snapshot()
			x, base := summarize(v), []dist{df, dr}[d]
			fmt.Fprintf(&tab, "%-30s %-3s %6d %+9.1f %+9.1f %+9.1f %7.0f%% %9.1f %7s\n", "emulated "+name, []string{"fwd", "rev"}[d], len(got),
				x.mean-base.mean, x.p50-base.p50, x.p99-base.p99, 100*float64(st.OnTime)/float64(max(st.OnTime+st.Late, 1)), float64(l.pumps[2*i+d].lead.get())/1e3, note)
		}
		for d := range sp {
			splits = append(splits, fmt.Sprintf("%-30s %s split, median µs: %s; nanosleep lateness %v",
				"emulated "+name, []string{"fwd", "rev"}[d], sp[d].String([]dist{df, dr}[d].p50), time.Duration(l.pumps[2*i+d].sleepLate.get())),
				fmt.Sprintf("%-30s %s %s", "emulated "+name, []string{"fwd", "rev"}[d], sp[d].tardiness()))
		}
	}
	for _, o := range oneWays {
		got := res[o.path]
		name := "userspace (TUN) " + o.p.Delay.String() + "/0"
		if o.split {
			name = "split (detour) " + o.p.Delay.String() + "/0"
		}
		var f, r []int64
		var sp [2]probeSplit
		for _, s := range got {
			f = append(f, s.fwd()-int64(o.p.Delay))
			r = append(r, s.rev())
			sp[0].add(l.tap.at[tapKey{0, s.seq}], s.t0, s.t1)
			sp[1].add(l.tap.at[tapKey{1, s.seq}], s.t2, s.t3)
		}
		for d := range sp {
			if pp := o.pumps[d]; pp != nil {
				splits = append(splits, fmt.Sprintf("%-30s %s split, median µs: %s; nanosleep lateness %v",
					name, []string{"fwd", "rev"}[d], sp[d].String([]dist{df, dr}[d].p50), time.Duration(pp.sleepLate.get())))
			}
		}
		for d, v := range [][]int64{f, r} {
			x, base := summarize(v), []dist{df, dr}[d]
			onTime, lead := "kernel", ""
			if pp := o.pumps[d]; pp != nil {
				st := pp.c.snapshot()
				onTime = fmt.Sprintf("%.0f%%", 100*float64(st.OnTime)/float64(max(st.OnTime+st.Late, 1)))
				lead = fmt.Sprintf("%.1f", float64(pp.lead.get())/1e3)
			}
			fmt.Fprintf(&tab, "%-30s %-3s %6d %+9.1f %+9.1f %+9.1f %8s %9s %7s\n", name, []string{"fwd", "rev"}[d], len(got),
				x.mean-base.mean, x.p50-base.p50, x.p99-base.p99, onTime, lead, "")
		}
	}
	t.Logf("delay probe results\n%s", tab.String())
	for _, s := range losses {
		t.Log(s)
	}
	t.Log("split: in = kernel arrival stamp - sender's stamp; wake = reader awake - arrival; late = Write start - (release - lead); " +
		"write = entry into the receiving stack - Write start; up = receiver's stamp - entry; " +
		"excess = in + late + (write - lead) + up - veth (at the medians, roughly)")
	for _, s := range splits {
		t.Log(s)
	}
	t.Logf("on-time: share of packets handed to Write at most %v after their release less the lead; lead-us: how far ahead of its release the writer hands a packet to Write, at the end", OnTimeSlack)
}

// lossLine says how many of kernel-carried setting i's probes were lost,
// seen from outside (probes sent and returned; a probe returns when
// neither direction dropped it) and by the loss programs' counters.
func (l *probeLab) lossLine(name string, i int, p emulation.Params, back int) string {
	sent := 0
	for seq := range l.sentAt {
		if int(seq%uint64(len(l.targets))) == i+1 {
			sent++
		}
	}
	lost := 100 * (1 - float64(back)/float64(max(sent, 1)))
	want := 100 * (1 - (1-p.Loss/100)*(1-p.Loss/100))
	s := fmt.Sprintf("%s: %d probes sent, %d back: %.2f %% of round trips lost (%.2f %% expected for %v each way)", name, sent, back, lost, want, emulation.FormatPercent(p.Loss))
	for d, k := range l.kernel[i] {
		if k != nil {
			c := k.Counts()
			s += fmt.Sprintf("; %s program dropped %d of %d (%.2f %%), %d unsplit", []string{"fwd", "rev"}[d], c.Dropped, c.Seen, 100*float64(c.Dropped)/float64(max(c.Seen, 1)), c.Unsplit)
		}
	}
	return s
}

// probeSettings returns, per probe of emulated path path (in the order
// got holds them), the delay the shaper drew for it forward and back: the
// link's two directions draw from the engine's random streams stream and
// stream+1 (seed probeSeed, as newProbeLab's engine), one draw per packet
// the emulator read, in the order it read them. The tap saw which probes
// each direction read (a probe whose reply was lost still took a draw), so
// a twin shaper fed the same packets in the same order, at their send
// times, draws the same delays and applies the same FIFO clamp. That holds
// while nothing but probes crossed the link; a returned probe the tap did
// not see read makes it give up (exact false) and return the nominal
// delay.
func probeSettings(l *probeLab, path int, p emulation.Params, stream uint64, got []probeSample) (fwd, rev []int64, exact bool) {
	fwd, rev = make([]int64, len(got)), make([]int64, len(got))
	nominal := func(exact bool) ([]int64, []int64, bool) {
		for k := range got {
			fwd[k], rev[k] = int64(p.Delay), int64(p.Delay)
		}
		return fwd, rev, exact
	}
	if p.Jitter == 0 {
		return nominal(true)
	}
	back := map[uint64]probeSample{}
	for _, s := range got {
		back[s.seq] = s
	}
	var seqs []uint64
	for seq := range l.sentAt {
		if int(seq%uint64(len(l.targets))) == path {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	fs, rs := newShaper(p, probeSeed, stream), newShaper(p, probeSeed, stream+1)
	fd, rd := map[uint64]int64{}, map[uint64]int64{}
	for _, seq := range seqs {
		s, ok := back[seq]
		if ts := l.tap.at[tapKey{0, seq}]; ts != nil && ts.read != 0 {
			at := l.sentAt[seq]
			if ok {
				at = s.t0
			}
			r, _, _ := fs.admit(at, probeLen, 0)
			fd[seq] = r - at
		}
		if ts := l.tap.at[tapKey{1, seq}]; ts != nil && ts.read != 0 {
			at := ts.read
			if ok {
				at = s.t2
			}
			r, _, _ := rs.admit(at, probeLen, 0)
			rd[seq] = r - at
		}
	}
	for k, s := range got {
		f, okf := fd[s.seq]
		r, okr := rd[s.seq]
		if !okf || !okr {
			return nominal(false)
		}
		fwd[k], rev[k] = f, r
	}
	return fwd, rev, true
}

// bulkSink accepts one TCP connection on probePort, reads it to the end and
// prints the bytes it got.
func bulkSink() error {
	ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", probePort))
	if err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, c)
	fmt.Println(n)
	return err
}

// bulkSource sends to STRAIT_EMU_PROBE_TARGETS for STRAIT_EMU_PROBE_INTERVAL.
func bulkSource() error {
	d, err := time.ParseDuration(os.Getenv("STRAIT_EMU_PROBE_INTERVAL"))
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp4", net.JoinHostPort(os.Getenv("STRAIT_EMU_PROBE_TARGETS"), strconv.Itoa(probePort)))
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	return c.Close()
}

// TestThroughputExperiment runs one TCP stream (bbr) for 5 s through an
// emulated link of 5 ms each way (STRAIT_EMU_PROBE_BULK_DELAY and
// STRAIT_EMU_PROBE_BULK_LOSS, in percent, change it) and prints its rate
// and the CPU the emulator (this process) spent per Gbit/s. Like TestDelayProbeExperiment
// it needs root and STRAIT_EMU_PROBE=1.
func TestThroughputExperiment(t *testing.T) {
	if os.Getenv("STRAIT_EMU_PROBE") == "" {
		t.Skip("set STRAIT_EMU_PROBE=1 (needs root): measures the emulator's throughput and CPU")
	}
	noLead := os.Getenv("STRAIT_EMU_PROBE_NOLEAD") != ""
	link := emulation.Params{Delay: 5 * time.Millisecond}
	if v := os.Getenv("STRAIT_EMU_PROBE_BULK_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("STRAIT_EMU_PROBE_BULK_DELAY: %v", err)
		}
		link.Delay = d
	}
	if v := os.Getenv("STRAIT_EMU_PROBE_BULK_LOSS"); v != "" {
		pct, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("STRAIT_EMU_PROBE_BULK_LOSS: %v", err)
		}
		link.Loss = pct
	}
	l := newProbeLab(t, []emulation.Params{link}, []bool{noLead})
	for _, ns := range []string{l.nsA, l.nsB} {
		testenv.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=bbr", "net.ipv4.tcp_wmem=4096 65536 16777216", "net.ipv4.tcp_rmem=4096 131072 33554432")
	}
	sink := probeCommand(t, l.nsB, "sink")
	var got strings.Builder
	sink.Stdout, sink.Stderr = &got, os.Stderr
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	const dur = 5 * time.Second
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	load0 := loadavg()
	start := time.Now()
	src := probeCommand(t, l.nsA, "source", "STRAIT_EMU_PROBE_TARGETS="+l.targets[1], "STRAIT_EMU_PROBE_INTERVAL="+dur.String())
	src.Stderr = os.Stderr
	if err := src.Run(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Wait(); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	var n float64
	fmt.Sscan(got.String(), &n)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	gbps := n * 8 / el.Seconds() / 1e9
	t.Logf("%v each way, loss %v %%: load %s → %s: %.2f Gbit/s, emulator CPU %.2f cores, %.2f cores per Gbit/s", link.Delay, link.Loss, load0, loadavg(), gbps, cpu.Seconds()/el.Seconds(), cpu.Seconds()/el.Seconds()/gbps)
}
