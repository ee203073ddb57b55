//go:build !linux

package emulator

import (
	"context"
	"fmt"
	"runtime"

	"github.com/strait-net/strait/lab/emulation"
)

// errOS is why nothing here emulates a link: the emulator's devices are
// Linux's TUN devices and veth pairs, its clock timerfd and its kernel
// loss a tcx program (docs/topology.md, "Accuracy"). The package builds
// elsewhere so that cmd/strait does; its configuration still validates.
var errOS = fmt.Errorf("the link emulator is not supported on %s: it needs Linux", runtime.GOOS)

// Run checks cfg and returns errOS.
func Run(_ context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return errOS
}

// KernelLoss is never attached here (AttachLoss returns errOS).
type KernelLoss struct{}

// AttachLoss returns errOS.
func AttachLoss(_, _ string, _ emulation.Params) (*KernelLoss, error) { return nil, errOS }

// Counts is zero: nothing was counted.
func (*KernelLoss) Counts() LossCounts { return LossCounts{} }

// Close does nothing.
func (*KernelLoss) Close() {}

// ProbeTCX returns errOS: tcx is Linux's.
func ProbeTCX(string) error { return errOS }
