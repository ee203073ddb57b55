package rawsock

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2) on a non-blocking fd as a raw system call, retried on
// EINTR. It returns syscall.EAGAIN when there is nothing to read.
func Read(fd int, p []byte) (int, error) { return rawRW(unix.SYS_READ, fd, p) }

// Write is write(2) on a non-blocking fd as a raw system call, retried on
// EINTR. It returns syscall.EAGAIN when the socket's buffer is full, and
// may write less than p.
func Write(fd int, p []byte) (int, error) { return rawRW(unix.SYS_WRITE, fd, p) }

func rawRW(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return rawCall(trap, fd, unsafe.Pointer(&p[0]), len(p))
}

// Writev is writev(2) of bufs on a non-blocking fd as a raw system call,
// retried on EINTR. It returns syscall.EAGAIN when the socket's buffer is
// full, and may write less than bufs.
func Writev(fd int, bufs [][]byte) (int, error) {
	var iov [maxIovecs]unix.Iovec
	k := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if k == len(iov) {
			break
		}
		iov[k].Base = &b[0]
		iov[k].SetLen(len(b))
		k++
	}
	if k == 0 {
		return 0, nil
	}
	return rawCall(unix.SYS_WRITEV, fd, unsafe.Pointer(&iov[0]), k)
}

// rawCall makes the raw system call trap(fd, buf, n), retried on EINTR.
func rawCall(trap uintptr, fd int, buf unsafe.Pointer, n int) (int, error) {
	for {
		r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(buf), uintptr(n))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}
