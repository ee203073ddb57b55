package load

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestEchoOnce(t *testing.T) {
	serve := func(reply func(c net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); reply(c) }()
			}
		}()
		return ln.Addr().String()
	}
	echo := serve(func(c net.Conn) { _, _ = io.Copy(c, c) })
	if err := EchoOnce(echo, []byte("hello"), 5*time.Second); err != nil {
		t.Fatalf("echo server: %v", err)
	}
	liar := serve(func(c net.Conn) {
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		_, _ = c.Write([]byte("HELLO"))
	})
	if err := EchoOnce(liar, []byte("hello"), 5*time.Second); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("server answering other bytes: %v, want a difference reported", err)
	}
	silent := serve(func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	if err := EchoOnce(silent, []byte("hello"), 200*time.Millisecond); err == nil {
		t.Fatal("server that never answers: no error")
	}
}
