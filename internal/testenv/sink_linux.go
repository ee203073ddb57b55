package testenv

import (
	"io"
	"net"
)

// Sink listens on addr (port 0 for any) in network namespace ns, accepts
// one connection and reads it to its end; got receives the bytes read, or
// -1 when no connection came (ln was closed first).
func Sink(ns, addr string) (ln net.Listener, got <-chan int64, err error) {
	if err := InNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, nil, err
	}
	n := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			n <- -1
			return
		}
		defer c.Close()
		k, _ := io.Copy(io.Discard, c)
		n <- k
	}()
	return ln, n, nil
}
