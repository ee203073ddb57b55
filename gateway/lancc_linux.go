package gateway

import (
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/tunnel/wancc"
)

// lanAlgorithm is strait's congestion control for LAN sockets, registered
// once per process under a name of its own (straitl_<pid>, as the WAN's is
// strait_<pid>): no least jitter allowance (wancc.Options).
var lanAlgorithm = wancc.NewPerProcess("straitl_", wancc.Options{})

// lanAlgorithmMissing logs once per process that the kernel cannot take
// lanAlgorithm, as the WAN side does.
var lanAlgorithmMissing sync.Once

// lanCongestion resolves Config.LANCongestion to the algorithm the
// gateway's LAN sockets get ("" leaves them on the kernel default) and,
// when that is strait's own, the algorithm for its loss counters.
func (g *Gateway) lanCongestion() (string, *wancc.Algorithm) {
	switch g.cfg.LANCongestion {
	case "":
		a, err := lanAlgorithm.Get()
		if err != nil {
			lanAlgorithmMissing.Do(func() {
				g.log.Warn("LAN sockets stay on the kernel's congestion control: strait's cannot be loaded here (docs/congestion.md)", "err", err)
			})
			return "", nil
		}
		return a.Name(), a
	case "system":
		return "", nil
	}
	return g.cfg.LANCongestion, nil
}

// setCongestion gives socket c congestion control name ("" leaves it).
// The kernel refuses an algorithm it does not have with ENOENT.
func setCongestion(c syscall.RawConn, name string) error {
	if name == "" {
		return nil
	}
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); cerr != nil {
		return cerr
	}
	return err
}

// setListenerCongestion gives a listener for clients the LAN congestion
// control, which the kernel passes on to every connection it accepts.
func (g *Gateway) setListenerCongestion(ln *net.TCPListener) {
	if raw, err := ln.SyscallConn(); err == nil {
		_ = setCongestion(raw, g.lanCC) // as dialTCP: the kernel's where it lacks lanCC
	}
}
