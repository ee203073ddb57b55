//go:build !linux

package rawsock

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Read is read(2) on a non-blocking fd, retried on EINTR. Off Linux it is
// the ordinary system call.
func Read(fd int, p []byte) (int, error) {
	return retryEINTR(func() (int, error) { return unix.Read(fd, p) })
}

// Write is write(2) on a non-blocking fd, retried on EINTR. Off Linux it is
// the ordinary system call.
func Write(fd int, p []byte) (int, error) {
	return retryEINTR(func() (int, error) { return unix.Write(fd, p) })
}

// Writev writes bufs on a non-blocking fd, retried on EINTR. Off Linux it
// is the ordinary writev(2).
func Writev(fd int, bufs [][]byte) (int, error) {
	return retryEINTR(func() (int, error) { return unix.Writev(fd, bufs) })
}

func retryEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}
