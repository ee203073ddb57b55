package gateway

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// socketDrops reads the kernel's drop counter of the socket fd: sk_drops of
// SO_MEMINFO's answer (linux/sock_diag.h), the datagrams the kernel dropped
// at this socket, for a full receive buffer above all. ok is false where the
// kernel does not tell (before Linux 4.1). SO_MEMINFO's number differs
// between architectures (55 on most, 57 on sparc64), hence unix's constant.
func socketDrops(fd uintptr) (drops uint32, ok bool) {
	var info [unix.SK_MEMINFO_VARS]uint32
	size := uint32(unsafe.Sizeof(info))
	_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 || size < uint32(unsafe.Sizeof(info)) {
		return 0, false
	}
	return info[unix.SK_MEMINFO_DROPS], true
}
