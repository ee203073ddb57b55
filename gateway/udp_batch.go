package gateway

import (
	"errors"
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// datagramSender sends the datagrams a stream brought with one sendmmsg(2)
// per batch: at tens of thousands of datagrams per second a system call
// per datagram was three quarters of a gateway's CPU (pprof, 50 000/s).
// The datagrams stay in the DatagramReader's buffer until the flush, so
// batching costs no copy and no memory per flow.
type datagramSender struct {
	w    batchWriter
	to   net.Addr // nil on a connected socket
	msgs []ipv4.Message
	n    int
}

// batchWriter is the WriteBatch of ipv4.PacketConn and ipv6.PacketConn,
// whose Message types are the same.
type batchWriter interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

var errNotSent = errors.New("datagram not sent")

// udpWriteBatch is the most datagrams one sendmmsg carries.
const udpWriteBatch = 64

func newDatagramSender(c *net.UDPConn, to net.Addr) *datagramSender {
	var w batchWriter
	if la, ok := c.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() == nil {
		w = ipv6.NewPacketConn(c)
	} else {
		w = ipv4.NewPacketConn(c)
	}
	s := &datagramSender{w: w, to: to, msgs: make([]ipv4.Message, udpWriteBatch)}
	for i := range s.msgs {
		s.msgs[i].Buffers = make([][]byte, 1)
		s.msgs[i].Addr = to
	}
	return s
}

// add queues p, which must stay valid until flush; full reports that
// the batch must be flushed before the next add.
func (s *datagramSender) add(p []byte) (full bool) {
	s.msgs[s.n].Buffers[0] = p
	s.n++
	return s.n == len(s.msgs)
}

// flush sends the queued datagrams and returns how many went and their
// bytes. A datagram the kernel refuses is skipped and reported to dropped
// (ECONNREFUSED: the target's ICMP port unreachable for an earlier one);
// a closed socket ends the flush with net.ErrClosed.
func (s *datagramSender) flush(dropped func(error)) (sent, bytes int, err error) {
	ms := s.msgs[:s.n]
	for len(ms) > 0 {
		n, err := s.w.WriteBatch(ms, 0)
		for _, m := range ms[:max(n, 0)] {
			bytes += len(m.Buffers[0])
		}
		if n > 0 {
			sent += n
			ms = ms[n:]
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			s.clear()
			return sent, bytes, net.ErrClosed
		}
		// sendmmsg fails only for its first datagram: skip that one.
		if err == nil {
			err = errNotSent
		}
		dropped(err)
		ms = ms[1:]
	}
	s.clear()
	return sent, bytes, nil
}

func (s *datagramSender) clear() {
	for i := range s.msgs[:s.n] {
		s.msgs[i].Buffers[0] = nil
	}
	s.n = 0
}
