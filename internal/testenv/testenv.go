// Package testenv holds what tests that cross a real network need: root
// checks, a freshly built strait binary, and network namespaces that are
// removed when the test ends. Entering a namespace and looking at its BPF
// programs (bpf_linux.go) is Linux's; elsewhere those helpers return an
// error (bpf_other.go), so that `go build ./...` and `go vet ./...` work.
package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/freeport"
)

// RequireRoot skips t unless the test runs as root, which network
// namespaces, TUN devices and qdiscs need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and devices (run as root, e.g. sudo make test)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command")
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	// inMain is set by Main: only then is the binary removed at the end.
	inMain bool
)

// StraitBinary builds cmd/strait once per test process and returns its path.
// Tests start it with `ip netns exec` rather than entering namespaces
// themselves. The package's TestMain must be Main, which removes the
// binary: without it every run left a 100 MB directory in /tmp.
func StraitBinary(t testing.TB) string {
	t.Helper()
	if !inMain {
		t.Fatal("testenv.StraitBinary needs the package's TestMain to be testenv.Main, which removes the binary it builds (add func TestMain(m *testing.M) { testenv.Main(m) })")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strait-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "strait")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/strait")
		cmd.Dir = moduleRoot()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/strait: %v\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// UniqueName returns prefix followed by a short random suffix, for names of
// namespaces and labs that must not collide with parallel tests.
func UniqueName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Netns creates a network namespace named name (see UniqueName) with its
// loopback up, and removes it — killing any process still inside — when t
// ends.
func Netns(t testing.TB, name string) string {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { RemoveNetns(name) })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// RemoveNetns kills every process in the namespace and deletes it.
func RemoveNetns(name string) {
	out, _ := exec.Command("ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for i := 0; i < 50; i++ {
		if exec.Command("ip", "netns", "del", name).Run() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Run runs a command and fails t with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// KilledOutputWait bounds how long waiting for a killed process reads what
// is left of its output: a child it started (a shell's) may hold the pipe
// open long after, and the wait must not outlast the test's patience.
const KilledOutputWait = 10 * time.Second

// Start starts a background process that is killed when t ends.
func Start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = KilledOutputWait
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && out.Len() > 0 {
			t.Logf("output of %s %s:\n%s", name, strings.Join(args, " "), out.String())
		}
	})
	return cmd
}

// FreeAddr returns a loopback address ("127.0.0.1:port") for a process the
// test starts; no two calls in a test binary return the same port.
//
// Until the test ends the port stays bound by a socket of this process that
// never listens: connections to the address are refused while nothing
// listens there, and a listener still binds it because both set
// SO_REUSEADDR (Go's net.Listen always does). Meanwhile the kernel hands the
// port to no other bind(0) and uses it as no outgoing connection's source
// port, so a server killed and started again on its address, or started
// only after a while, finds it free. A port picked and closed was fair game
// for both: TestPoolWaitLive started its gateway 200 ms after closing the
// port it was given and got "address already in use" under load.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 64 {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		fd, err := holdPort(a)
		if errors.Is(err, syscall.EADDRINUSE) {
			continue // taken between freeport's pick and the hold
		}
		if err != nil {
			t.Fatalf("hold %s: %v", a, err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return a
	}
	t.Fatal("free loopback port: every port picked was taken before it could be held")
	return ""
}

// holdPort binds a TCP socket with SO_REUSEADDR to addr without listening.
func holdPort(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, err
	}
	fd, err := freeport.TCPSocket()
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// ProcessAlive reports whether pid runs. A zombie counts as dead: a daemon
// whose parent exited is reparented to PID 1, which in a container may never
// reap it, so kill(pid, 0) would still succeed.
func ProcessAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Main runs a package's tests and then deletes the binary StraitBinary
// built, which otherwise outlives the test process. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	inMain = true
	code := m.Run()
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
	os.Exit(code)
}

// BPFFS mounts a fresh bpffs instance on a temporary directory (pins in it
// are seen by nothing else) and unmounts it when t ends, which frees every
// object still pinned there. Processes started later with `ip netns exec`
// see it too: that command remounts /sys, not the temporary directory.
func BPFFS(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir, err := os.MkdirTemp("", "strait-bpffs-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", dir).CombinedOutput(); err != nil {
		_ = os.Remove(dir)
		t.Skipf("cannot mount bpffs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("umount", dir).Run()
		_ = os.Remove(dir)
	})
	return dir
}

// RouteVia adds a route to dst (an address or prefix) in netns along the
// path netns takes toward the address towards: same gateway and device.
// Labs route between node addresses only; tests route extra addresses,
// such as clusterset IPs, this way.
func RouteVia(t testing.TB, netns, dst, towards string) {
	t.Helper()
	f := strings.Fields(Run(t, "ip", "-n", netns, "-o", "route", "get", towards))
	args := []string{"-n", netns, "route", "add", dst}
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" || f[i] == "dev" {
			args = append(args, f[i], f[i+1])
		}
	}
	Run(t, "ip", args...)
}
