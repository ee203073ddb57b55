package freeport

import "syscall"

// TCPSocket opens an IPv4 TCP socket closed on exec (SOCK_CLOEXEC, which
// only some OSes take in socket(2)'s type).
func TCPSocket() (int, error) {
	return syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
