package linkcheck

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

const tcpiOptTimestamps = 1 // TCPI_OPT_TIMESTAMPS

// fillTCPInfo records the segment size, header size and congestion
// control of c.
func fillTCPInfo(c *net.TCPConn, r *BulkReport) {
	sc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = sc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		r.MSS = int(info.Snd_mss)
		if r.Direction == "b-to-a" {
			r.MSS = int(info.Rcv_mss)
		}
		r.HeaderBytes = 20 + 20
		if c.LocalAddr().(*net.TCPAddr).IP.To4() == nil {
			r.HeaderBytes = 40 + 20
		}
		if info.Options&tcpiOptTimestamps != 0 {
			r.HeaderBytes += 12
		}
		r.Retransmits = info.Total_retrans
		if cc, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); err == nil {
			r.CC = cc
		}
	})
}

func setCongestion(c *net.TCPConn, cc string) error {
	sc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("congestion control %q: %w", cc, serr)
	}
	return nil
}
