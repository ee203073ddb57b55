//go:build !linux

package packet

import (
	"fmt"
	"runtime"
)

// errOS is why the packet mode cannot run here: its programs are Linux
// eBPF attached with tcx (docs/packet.md, "Requirements"). Elsewhere the
// package builds, so that the gateway and cmd/strait do, and everything
// that needs the kernel data path returns this.
var errOS = fmt.Errorf("the packet mode is not supported on %s: it needs Linux 6.6 or later (docs/packet.md, Requirements)", runtime.GOOS)

// mapMmapable is 0: no map is created here (checkOS fails Load first).
const mapMmapable = 0

func checkOS() error { return errOS }

func checkBPFFS(string) error { return errOS }

func udpSocket(bool) (int, error) { return -1, errOS }
