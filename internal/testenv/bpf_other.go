//go:build !linux

package testenv

import (
	"fmt"
	"runtime"
)

// errOS is what the namespace and BPF helpers return here: network
// namespaces, setns and bpffs are Linux's. They exist so that the tests
// that call them build (go vet) on other OSes too.
var errOS = fmt.Errorf("network namespaces and BPF: not supported on %s", runtime.GOOS)

// InNetns returns errOS without running f.
func InNetns(string, func() error) error { return errOS }

// BPFAttached returns errOS.
func BPFAttached(string) (string, error) { return "", errOS }

// BPFPins returns errOS.
func BPFPins(string) (string, error) { return "", errOS }

// BPFFileDescriptors returns errOS.
func BPFFileDescriptors() (string, error) { return "", errOS }
