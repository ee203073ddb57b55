package cpulatency

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

func request(us int32) (func() error, error) {
	f, err := os.OpenFile(Device, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrUnsupported
	}
	if err != nil {
		return nil, fmt.Errorf("CPU latency QoS: %w", err)
	}
	// The kernel takes the value as a native 32-bit integer (or as a hex
	// string); it updates the request in place.
	if err := binary.Write(f, binary.NativeEndian, us); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU latency QoS: write %d µs: %w", us, err)
	}
	return f.Close, nil
}

func current() (int32, error) {
	f, err := os.Open(Device)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrUnsupported
	}
	if err != nil {
		return 0, fmt.Errorf("CPU latency QoS: %w", err)
	}
	defer f.Close()
	// A read returns the limit in force over every request (its own, held
	// only while open, is the default: no limit).
	var us int32
	if err := binary.Read(f, binary.NativeEndian, &us); err != nil {
		return 0, fmt.Errorf("CPU latency QoS: read %s: %w", Device, err)
	}
	return us, nil
}
