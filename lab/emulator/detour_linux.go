package emulator

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// detour carries the delayed direction of a veth pair whose other
// direction is undelayed (Link.Veth). The kernel carries the undelayed
// direction as on any veth pair, with no thread in its way; through a pair
// of TUN devices it paid the emulator reader's wake-up, 38-44 µs per packet
// on this kind of VM (see docs/topology.md, "Accuracy").
//
// The delayed direction's IP packets are taken off the sending veth end
// by a tcx egress program that redirects them (bpf_redirect, to the
// egress of a device: the frame keeps its Ethernet header) into a TAP
// device in the same namespace; ARP and other frames go on across the
// veth, so neighbour resolution is the kernel's both ways. The emulator
// reads the TAP device as it reads a TUN device (one frame a read, dated
// by the same arrival filter), holds each packet for the direction's
// impairments, and sends it out of the same veth end through an AF_PACKET
// socket with PACKET_QDISC_BYPASS: such a send goes to the device's
// transmit function directly, past the tc egress hook, so it is not
// redirected again (packet_xmit in net/packet/af_packet.c; the lab's test
// of this backend fails if it were: no packet would arrive). It then
// crosses the veth into the peer namespace in the emulator's system call,
// where a departure program on the receiving end's ingress stamps it, and
// the writer learns its lead from those stamps as it does for a TUN device.
//
// The socket is SOCK_DGRAM: the kernel writes the Ethernet header, to the
// peer's address (a veth pair has one neighbour), so the engine sees IP
// packets, as from a TUN device.
//
// Everything here belongs to this process: the TAP device goes when its
// descriptor is closed, the programs are attached through links that go
// when their descriptors are. Should the emulator die, nothing is left
// behind, and the direction is then carried undelayed by the veth.
type detour struct {
	tap, sock *os.File
	tapRC     syscall.RawConn
	sockRC    syscall.RawConn
	ifindex   int // of the sending veth end, in its namespace
	peer      net.HardwareAddr
	redirect  link.Link
	redirProg *ebpf.Program
	dep       *departures
	once      sync.Once
	closeErr  error
}

// ethHeader is the length of an Ethernet header without a VLAN tag: the
// TAP device's frames start with one.
const ethHeader = 14

// detourName is the TAP device of the sending veth end dev: a name of its
// own (a hash of dev's, so that two veth ends in one namespace get two)
// within the kernel's 15 bytes.
func detourName(dev string) string {
	h := fnv.New32a()
	h.Write([]byte(dev))
	return fmt.Sprintf("dtr%08x", h.Sum32())
}

// createDetour takes the delayed direction from veth end from to its peer
// to (Link.Veth) off the kernel's path, as the detour type describes.
func createDetour(from, to Endpoint, mtu int) (d *detour, err error) {
	d = &detour{}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	err = inNetns(to.Netns, func() error {
		idx, err := ifIndex(to.Device)
		if err != nil {
			return err
		}
		ifc, err := net.InterfaceByIndex(idx)
		if err != nil {
			return err
		}
		if len(ifc.HardwareAddr) != 6 {
			return fmt.Errorf("%s has no Ethernet address (%v): want a veth end", to.Device, ifc.HardwareAddr)
		}
		d.peer = ifc.HardwareAddr
		// The departure stamps are optional, as for a TUN device: without
		// them the writer has no lead.
		d.dep, _ = attachDepartures(idx)
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("receiving end %s in netns %q: %w", to.Device, to.Netns, err)
	}
	tapName := detourName(from.Device)
	err = inNetns(from.Netns, func() error {
		var err error
		if d.ifindex, err = ifIndex(from.Device); err != nil {
			return err
		}
		if d.tap, err = openTAP(tapName, mtu); err != nil {
			return fmt.Errorf("TAP device %s: %w", tapName, err)
		}
		if d.sock, err = packetSocket(d.ifindex); err != nil {
			return err
		}
		tapIndex, err := ifIndex(tapName)
		if err != nil {
			return err
		}
		if d.redirProg, err = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "strait_detour",
			Type:         ebpf.SchedCLS,
			License:      "GPL",
			Instructions: redirectProgram(tapIndex),
		}); err != nil {
			return fmt.Errorf("redirect program: %w", err)
		}
		// Attached last: from here on the veth end's IP packets go
		// to the TAP device, whose reader is ready.
		d.redirect, err = link.AttachTCX(link.TCXOptions{Interface: d.ifindex, Program: d.redirProg, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return fmt.Errorf("attach redirect program to %s egress (tcx: Linux 6.6 or later): %w", from.Device, err)
		}
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("sending end %s in netns %q: %w", from.Device, from.Netns, err)
	}
	if d.tapRC, err = d.tap.SyscallConn(); err != nil {
		return d, err
	}
	if d.sockRC, err = d.sock.SyscallConn(); err != nil {
		return d, err
	}
	return d, nil
}

// openTAP creates the TAP device name in the calling thread's network
// namespace, without a packet information header (frames start with the
// Ethernet header), non-blocking, and brings it up with the link's MTU and
// a TUN device's queue length (see txQueueLen). It goes when the file is
// closed.
func openTAP(name string, mtu int) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun")
	if err := setLink(name, mtu); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// setLink sets the device's MTU and queue length and brings it up, in the
// calling thread's network namespace.
func setLink(name string, mtu int) error {
	if err := setTxQueueLen(name, txQueueLen); err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("mtu %d: %w", mtu, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	return nil
}

// packetSocket opens the AF_PACKET socket that sends out of device
// ifindex, past its qdisc and tc egress hook (PACKET_QDISC_BYPASS). It is
// bound with protocol 0, so it receives nothing.
//
// The socket blocks and stays out of Go's netpoller. Every packet it
// sends is charged to it until the receiver frees it, in its recvfrom,
// and the kernel then wakes the socket's waiters (sock_def_write_space):
// with the socket in the netpoller's epoll set, that woke another thread
// from inside the receiver's system call, and the delayed direction
// arrived 2-6 µs later at the median (the delay probe's one-way rows, load
// 5-8). A blocking send waits only while the socket's send buffer is full
// of packets the peer namespace has not yet taken.
func packetSocket(ifindex int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind packet socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
	}
	return os.NewFile(uintptr(fd), "packet"), nil
}

// tcxRedirect is TCX_REDIRECT, what bpf_redirect returns on success.
const tcxRedirect = 7

// redirectProgram sends IPv4 and IPv6 packets to the egress of device
// tapIndex and lets every other frame go on.
func redirectProgram(tapIndex int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbProtocol, asm.Word),
		asm.JEq.Imm(asm.R2, int32(htons(unix.ETH_P_IP)), "ip"),
		asm.JEq.Imm(asm.R2, int32(htons(unix.ETH_P_IPV6)), "ip"),
		asm.Mov.Imm(asm.R0, tcxNext),
		asm.Return(),
		asm.Mov.Imm(asm.R1, int32(tapIndex)).WithSymbol("ip"),
		asm.Mov.Imm(asm.R2, 0), // flags 0: to the device's egress
		asm.FnRedirect.Call(),
		asm.Return(),
	}
}

// Read returns one IP packet the sending namespace routed into the link,
// without its Ethernet header (at most one a call: the arrival filter
// dates one packet a read).
func (d *detour) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if offset < ethHeader {
		return 0, fmt.Errorf("detour read: offset %d leaves no room for the %d-byte Ethernet header", offset, ethHeader)
	}
	frame := bufs[0][offset-ethHeader:]
	var n int
	var rerr error
	err := d.tapRC.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), frame)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, fmt.Errorf("detour read: %w", os.ErrClosed)
	}
	if rerr != nil {
		return 0, fmt.Errorf("detour read: %w", rerr)
	}
	if n <= ethHeader {
		return 0, nil
	}
	sizes[0] = n - ethHeader
	return 1, nil
}

// Write sends each packet across the veth pair to the peer, and returns
// the first error after trying them all.
func (d *detour) Write(bufs [][]byte, offset int) (int, error) {
	sent := 0
	var first error
	for _, b := range bufs {
		pkt := b[offset:]
		if len(pkt) == 0 {
			continue
		}
		proto := uint16(unix.ETH_P_IP)
		if pkt[0]>>4 == 6 {
			proto = unix.ETH_P_IPV6
		}
		sa := &unix.SockaddrLinklayer{Ifindex: d.ifindex, Protocol: htons(proto), Halen: 6}
		copy(sa.Addr[:], d.peer)
		var werr error
		err := d.sockRC.Write(func(fd uintptr) bool {
			werr = unix.Sendto(int(fd), pkt, 0, sa)
			return werr != unix.EAGAIN
		})
		if err != nil {
			return sent, fmt.Errorf("detour write: %w", os.ErrClosed)
		}
		if werr != nil {
			if first == nil {
				first = fmt.Errorf("detour write: %w", werr)
			}
			continue
		}
		sent++
	}
	return sent, first
}

// BatchSize is how many packets the writer hands to one Write. Read
// returns one.
func (d *detour) BatchSize() int { return 32 }

// File lets the reader wait for the TAP device in poll(2) and attach the
// arrival filter to it (see readWaiter).
func (d *detour) File() *os.File { return d.tap }

// linkHeader says that the frames the arrival filter sees start with an
// Ethernet header.
func (d *detour) linkHeader() int { return ethHeader }

func (d *detour) departures() *departures { return d.dep }

// Close detaches the redirect first, so that the veth end's packets go on
// across it undelayed rather than into a TAP device that is going away,
// then closes the device and the socket. It is idempotent.
func (d *detour) Close() error {
	d.once.Do(func() { d.closeErr = d.close() })
	return d.closeErr
}

func (d *detour) close() error {
	var errs []error
	if d.redirect != nil {
		errs = append(errs, d.redirect.Close())
		d.redirect = nil
	}
	if d.redirProg != nil {
		d.redirProg.Close()
		d.redirProg = nil
	}
	for _, f := range []**os.File{&d.tap, &d.sock} {
		if *f != nil {
			if err := (*f).Close(); err != nil && !errors.Is(err, os.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	if d.dep != nil {
		// A writer may still hold the stamps; the last hold frees them.
		d.dep.release()
	}
	return errors.Join(errs...)
}
