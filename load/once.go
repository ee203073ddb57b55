package load

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// EchoOnce sends msg over a new TCP connection to an echo server at addr
// and checks that the same bytes come back, all within timeout: proof that
// a path (an import, say) is usable end to end.
func EchoOnce(addr string, msg []byte, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo through %s differs from what was sent", addr)
	}
	return nil
}
