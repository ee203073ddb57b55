package freeport

import "syscall"

// tcpSocket opens an IPv4 TCP socket closed on exec (SOCK_CLOEXEC, which
// only some OSes take in socket(2)'s type).
func tcpSocket() (int, error) {
	return syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
