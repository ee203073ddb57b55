package emulator

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// createTUN creates the TUN device name in network namespace netns ("" is
// the caller's). The device belongs to the namespace of the thread that
// creates it, so creation happens on a locked OS thread that enters netns
// and comes back. wireguard-go's CreateTUN turns on IFF_VNET_HDR with TSO
// and USO offloads: reads split super-packets, writes coalesce. drains
// tracks the goroutine that consumes the device's status events (wireguard's
// listeners block when nobody reads them); it ends after Close. The
// device carries departure stamps where they can be had (see departures).
func createTUN(netns, name string, mtu int, drains *sync.WaitGroup) (Device, error) {
	var dev *tunDevice
	err := inNetns(netns, func() (err error) {
		dev, err = createHere(name, mtu)
		return err
	})
	if err != nil {
		if dev != nil {
			// Created, but the thread could not switch back.
			_ = dev.Close()
		}
		return nil, err
	}
	drains.Go(func() {
		for range dev.Events() {
		}
	})
	return dev, nil
}

// inNetns runs fn on a locked OS thread that has entered network namespace
// netns ("" runs it on the calling goroutine's thread, unchanged), on a
// goroutine of its own: if switching back fails, that goroutine ends with
// its thread still locked, and Go then discards the thread instead of
// letting other goroutines run in the wrong namespace.
func inNetns(netns string, fn func() error) error {
	if netns == "" {
		return fn()
	}
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, ok := func() (error, bool) {
			target, err := unix.Open(filepath.Join("/var/run/netns", netns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open netns: %w", err), true
			}
			defer unix.Close(target)
			orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open own netns: %w", err), true
			}
			defer unix.Close(orig)
			if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns: %w", err), true
			}
			ferr := fn()
			if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
				return errors.Join(ferr, fmt.Errorf("setns back: %w", serr)), false
			}
			return ferr, true
		}()
		if ok {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// createHere creates the device in the calling thread's network namespace,
// sets its queue length and attaches the departure stamps.
func createHere(name string, mtu int) (*tunDevice, error) {
	dev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, err
	}
	if err := setTxQueueLen(name, txQueueLen); err != nil {
		dev.Close()
		return nil, err
	}
	return withDepartures(dev, name), nil
}

// txQueueLen replaces the TUN default of 500 packets for the queue in front
// of the emulator's reader. Packets wait there only while the reader is
// late; a longer queue turns such a stall into delay instead of loss the
// link was not asked for. TCP hands over 64 KiB super-packets, so this
// matters for small datagrams (UDP floods, ACK storms).
const txQueueLen = 4000

// setTxQueueLen sets the device's transmit queue length, in the calling
// thread's network namespace.
func setTxQueueLen(name string, n int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("txqueuelen: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(n))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFTXQLEN, ifr); err != nil {
		return fmt.Errorf("txqueuelen: %w", err)
	}
	return nil
}
