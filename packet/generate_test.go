package packet

import (
	"testing"

	"github.com/strait-net/strait/internal/testenv"
)

// TestGeneratedUpToDate: the committed objects are what bpf/packet.c
// compiles to (make bpf rebuilds them).
func TestGeneratedUpToDate(t *testing.T) { testenv.BPFGeneratedUpToDate(t, "packet") }
