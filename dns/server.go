// Package dns serves the clusterset zone of the Kubernetes Multi-Cluster
// Services API: <svc>.<ns>.svc.clusterset.local names for imported services,
// following the MCS DNS specification 1.0.0 (KEP-1645 specification.md).
//
// The server is authoritative for one zone and knows nothing else: names
// outside it are REFUSED, so it sits behind the cluster DNS (a CoreDNS
// "forward clusterset.local" stanza) rather than in front of it. Records are
// synthesized on every query from an [Imports], which the gateway implements
// from its catalog; [Static] is a ready-made one.
//
// Records served (zone "clusterset.local.", TTL from Config):
//
//	dns-version.<zone>                      TXT "1.0.0"
//	<svc>.<ns>.svc.<zone>                   A/AAAA: clusterset IPs (ClusterSetIP),
//	                                        or every ready endpoint address (Headless)
//	_<port>._<proto>.<svc>.<ns>.svc.<zone>  SRV 10 100 <port> <svc>.<ns>.svc.<zone>. (ClusterSetIP)
//	                                        SRV 10 100 <port> <host>.<cluster>.<svc>.<ns>.svc.<zone>. (Headless)
//	                                        for named ports only; target addresses in Additional
//	<host>.<cluster>.<svc>.<ns>.svc.<zone>  A/AAAA of that endpoint (Headless)
//	<zone>                                  SOA
//	<reversed ip>.in-addr.arpa / .ip6.arpa  PTR <svc>.<ns>.svc.<zone>. or
//	                                        <host>.<cluster>.<svc>.<ns>.svc.<zone>.
//	                                        (only if the Imports implements AddrLookup)
//
// Anything else in the zone is NXDOMAIN (SOA in Authority); a name that
// exists without records of the asked type is NOERROR with no answers.
// Names outside the zone, and reverse names of addresses no import has,
// are REFUSED.
package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	mdns "github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// Config configures a Server. The zero value serves an empty clusterset.local
// zone on 127.0.0.1:53.
type Config struct {
	// Listen is the host:port for both UDP and TCP. Default "127.0.0.1:53"
	// (binding port 53 needs CAP_NET_BIND_SERVICE). Port 0 picks a free
	// port, the same for both; see Server.Addr. Use a specific address
	// rather than a wildcard on multi-homed hosts: UDP answers leave by the
	// kernel's route choice, not necessarily from the address queried.
	Listen string
	// Zone is the clusterset zone. Default "clusterset.local." — the MCS API
	// requires that name; other values are for tests and experiments.
	Zone string
	// TTL of every record, whole seconds from 1s to 24h. Default 5s, like
	// the cluster-local DNS, because imports change.
	TTL time.Duration
	// Imports answers the service look-ups. Nil serves no services (only
	// dns-version and the SOA).
	Imports Imports
	// Logger gets start/stop and unexpected socket errors; never one line
	// per query. Nil discards.
	Logger *slog.Logger
	// UDPSize is the EDNS0 payload size advertised and the largest UDP
	// answer sent, 512-65535. Default 1232 (DNS flag day 2020), which avoids
	// IP fragmentation.
	UDPSize uint16
	// MaxTCPConns bounds concurrent TCP connections; more are closed at once.
	// Default 256.
	MaxTCPConns int
	// TCPIdleTimeout closes TCP connections that send no query for this
	// long (RFC 7766 6.2.3). Default 10s.
	TCPIdleTimeout time.Duration
}

const (
	defaultListen  = "127.0.0.1:53"
	defaultZone    = "clusterset.local."
	defaultTTL     = 5 * time.Second
	defaultUDPSize = 1232
	defaultMaxTCP  = 256
	defaultIdle    = 10 * time.Second
	maxTCPMsg      = 65535
)

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = defaultListen
	}
	if c.Zone == "" {
		c.Zone = defaultZone
	}
	if c.TTL == 0 {
		c.TTL = defaultTTL
	}
	if c.UDPSize == 0 {
		c.UDPSize = defaultUDPSize
	}
	if c.MaxTCPConns == 0 {
		c.MaxTCPConns = defaultMaxTCP
	}
	if c.TCPIdleTimeout == 0 {
		c.TCPIdleTimeout = defaultIdle
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate reports the first invalid field; zero fields take their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("dns: listen: %q is not host:port (e.g. 127.0.0.1:53): %w", c.Listen, err)
	}
	if _, err := netip.ParseAddr(host); err != nil && host != "" && host != "localhost" {
		return fmt.Errorf("dns: listen: host %q is not an IP address", host)
	}
	if p, err := net.LookupPort("udp", port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("dns: listen: port %q is not 0-65535", port)
	}
	labels, err := splitName(c.Zone)
	if err != nil {
		return fmt.Errorf("dns: zone: %q: %w", c.Zone, err)
	}
	if len(labels) == 0 {
		return errors.New("dns: zone: the root is not allowed; use e.g. clusterset.local.")
	}
	for _, l := range labels {
		if !isLabel(l) {
			return fmt.Errorf("dns: zone: label %q is not letters, digits and '-'", l)
		}
	}
	if c.TTL < time.Second || c.TTL > 24*time.Hour || c.TTL%time.Second != 0 {
		return fmt.Errorf("dns: ttl: %v is not whole seconds from 1s to 24h", c.TTL)
	}
	if c.UDPSize < mdns.MinMsgSize {
		return fmt.Errorf("dns: udp size: %d is not 512-65535", c.UDPSize)
	}
	if c.MaxTCPConns < 1 {
		return fmt.Errorf("dns: max tcp conns: %d is not positive", c.MaxTCPConns)
	}
	if c.TCPIdleTimeout < 0 {
		return fmt.Errorf("dns: tcp idle timeout: %v is negative", c.TCPIdleTimeout)
	}
	return nil
}

// Server is a clusterset DNS server on one UDP and one TCP socket.
type Server struct {
	cfg  Config
	r    *responder
	log  *slog.Logger
	udp  *net.UDPConn
	tcp  *net.TCPListener
	addr netip.AddrPort
	// pktinfo is 4 or 6 when udp listens on a wildcard address: answers
	// then leave from the address each query was sent to. Without it the
	// kernel picks the source by route, and a query that reached the
	// socket through a Service's DNAT (CoreDNS forwarding to strait-dns,
	// docs/k8s-nodes.md) got its answer from another address, which
	// conntrack could not map back: the client saw nothing.
	pktinfo int

	running   atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
	tcpConns  atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// New validates cfg and binds the UDP and TCP sockets, so that Addr is known
// and bind errors surface before Run.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:    cfg,
		r:      newResponder(cfg),
		log:    cfg.Logger,
		closed: make(chan struct{}),
		conns:  map[net.Conn]struct{}{},
	}
	if err := s.bind(); err != nil {
		return nil, err
	}
	return s, nil
}

// bind listens on TCP first and then UDP on the same port; with port 0 it
// retries when the kernel's TCP choice is taken for UDP.
func (s *Server) bind() error {
	host, port, _ := net.SplitHostPort(s.cfg.Listen)
	var lastErr error
	for range 20 {
		tl, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("dns: listen tcp %s: %w", s.cfg.Listen, err)
		}
		tcp := tl.(*net.TCPListener)
		ta := tcp.Addr().(*net.TCPAddr).AddrPort()
		uaddr := net.JoinHostPort(host, fmt.Sprint(ta.Port()))
		uc, err := net.ListenPacket("udp", uaddr)
		if err != nil {
			tcp.Close()
			lastErr = fmt.Errorf("dns: listen udp %s: %w", uaddr, err)
			if port == "0" && errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return lastErr
		}
		s.tcp, s.udp = tcp, uc.(*net.UDPConn)
		s.addr = netip.AddrPortFrom(ta.Addr().Unmap(), ta.Port())
		if s.udp.LocalAddr().(*net.UDPAddr).IP.IsUnspecified() {
			s.pktinfo = recvPktinfo(s.udp)
		}
		return nil
	}
	return lastErr
}

// Addr is the bound address, for both UDP and TCP.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats { return s.r.stats.snapshot() }

// Run serves until ctx is done or Close is called, and returns after every
// goroutine it started has exited. It returns nil on such a shutdown; it
// can be called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("dns: run: server already running or ran")
	}
	select {
	case <-s.closed:
		return fmt.Errorf("dns: run: %w", net.ErrClosed)
	default:
	}
	s.log.Info("dns serving", "addr", s.addr.String(), "zone", s.r.zone)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.closed:
		}
	})
	// A few readers on one socket let UDP use the cores without a queue.
	for range min(runtime.GOMAXPROCS(0), 4) {
		wg.Go(s.serveUDP)
	}
	wg.Go(func() { s.serveTCP(&wg) })
	wg.Wait()
	s.log.Info("dns stopped", "addr", s.addr.String())
	return nil
}

// Close stops the server; it is idempotent and safe to call before, during
// or without Run.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.udp.Close()
		s.tcp.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	return nil
}

func (s *Server) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// sockErr handles an error from a socket: false means stop (shutdown).
// Other errors are counted, since a DNS server should outlive them; read and
// accept errors are followed by a short pause so that a persistent one does
// not spin. Write errors are not: a client can cause them (UDP source port
// 0), and a pause would let it slow everyone down.
func (s *Server) sockErr(op string, err error, pause bool) bool {
	if s.isClosed() || errors.Is(err, net.ErrClosed) {
		return false
	}
	if s.r.stats.socketErrors.Add(1) == 1 {
		s.log.Warn("dns socket error (further ones are only counted)", "op", op, "err", err)
	}
	if pause {
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func (s *Server) serveUDP() {
	buf := make([]byte, 65535)
	oob := make([]byte, 128)
	for {
		n, oobn, _, from, err := s.udp.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if !s.sockErr("read udp", err, true) {
				return
			}
			continue
		}
		out := s.r.respond(buf[:n], maxTCPMsg, true)
		if out == nil {
			continue
		}
		if _, _, err := s.udp.WriteMsgUDPAddrPort(out, replySource(s.pktinfo, oob[:oobn]), from); err != nil && !s.sockErr("write udp", err, false) {
			return
		}
	}
}

func (s *Server) serveTCP(wg *sync.WaitGroup) {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if !s.sockErr("accept tcp", err, true) {
				return
			}
			continue
		}
		if s.tcpConns.Add(1) > int64(s.cfg.MaxTCPConns) {
			s.tcpConns.Add(-1)
			s.r.stats.tcpRejected.Add(1)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.isClosed() {
			s.mu.Unlock()
			s.tcpConns.Add(-1)
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		wg.Go(func() {
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			s.tcpConns.Add(-1)
			c.Close()
		})
	}
}

// serveConn answers length-prefixed queries in order until the client
// closes, goes idle, or sends something we drop (RFC 7766).
func (s *Server) serveConn(c net.Conn) {
	buf := make([]byte, 2+maxTCPMsg)
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.TCPIdleTimeout))
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(buf))
		if n == 0 {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		out := s.r.respond(buf[:n], maxTCPMsg, false)
		if out == nil {
			return
		}
		msg := make([]byte, 2+len(out))
		binary.BigEndian.PutUint16(msg, uint16(len(out)))
		copy(msg[2:], out)
		c.SetWriteDeadline(time.Now().Add(s.cfg.TCPIdleTimeout))
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// recvPktinfo asks the kernel to report each datagram's destination
// address; it returns the socket's family (4 or 6), or 0 if it cannot. The
// family decides the option: Go listens on "0.0.0.0" with a dual-stack IPv6
// socket where it can, and IPv4 datagrams then carry IPV6_PKTINFO too.
func recvPktinfo(c *net.UDPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	family := 0
	_ = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1) == nil {
			family = 6
		} else if unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1) == nil {
			family = 4
		}
	})
	return family
}

// replySource turns the destination address a query's control message
// reports into the control message that sends the answer from it; nil (the
// kernel's choice) when the socket has a fixed address or none was reported.
// Linux takes an IPV6_PKTINFO source that is IPv4-mapped for an IPv4
// destination on a dual-stack socket (x/net/ipv6 would drop such an address).
func replySource(family int, oob []byte) []byte {
	if family == 0 || len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		switch {
		case family == 6 && m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			var pi unix.Inet6Pktinfo
			copy(pi.Addr[:], m.Data[:16])
			return cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet6Pktinfo))
		case family == 4 && m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			in := (*unix.Inet4Pktinfo)(unsafe.Pointer(&m.Data[0]))
			pi := unix.Inet4Pktinfo{Spec_dst: in.Addr}
			return cmsg(unix.IPPROTO_IP, unix.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet4Pktinfo))
		}
	}
	return nil
}

func cmsg(level, typ int, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}
