package rawsock

import "net"

// TCPConn is a TCP connection whose Read and Write are raw system calls
// (Conn); everything else is the net package's.
type TCPConn struct {
	*net.TCPConn
	sock *Conn
}

// NewTCPConn wraps c.
func NewTCPConn(c *net.TCPConn) (*TCPConn, error) {
	sock, err := NewConn(c)
	if err != nil {
		return nil, err
	}
	return &TCPConn{TCPConn: c, sock: sock}, nil
}

func (c *TCPConn) Read(p []byte) (int, error)  { return c.sock.Read(p) }
func (c *TCPConn) Write(p []byte) (int, error) { return c.sock.Write(p) }

// WriteBuffers writes bufs in order, with one writev(2) when the socket
// takes them at once.
func (c *TCPConn) WriteBuffers(bufs ...[]byte) (int64, error) { return c.sock.WriteBuffers(bufs...) }

// Listener accepts TCPConns from a TCP listener.
type Listener struct{ net.Listener }

// Accept waits for the next connection; one that is not TCP comes as it
// is.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := NewTCPConn(tc)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return rc, nil
}
