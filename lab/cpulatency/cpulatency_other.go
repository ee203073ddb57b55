//go:build !linux

package cpulatency

func request(int32) (func() error, error) { return nil, ErrUnsupported }

func current() (int32, error) { return 0, ErrUnsupported }
