//go:build !linux

package freeport

import "syscall"

// TCPSocket opens an IPv4 TCP socket closed on exec, as package net does
// where socket(2) takes no SOCK_CLOEXEC: under ForkLock, so that no
// process started meanwhile inherits it.
func TCPSocket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	return fd, err
}
