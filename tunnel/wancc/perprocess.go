package wancc

import (
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// PerProcess is an Algorithm registered on first use under prefix followed
// by the process ID (strait_1234): the kernel drops it when the process
// exits, and processes sharing a kernel (the lab's gateways) each hold
// their own. Congestion control names are the kernel's, not a PID
// namespace's: gateways in pods on nodes that share one kernel (the
// real-node clusters of scripts/k8s-nodes.sh, kind, k3d) are each PID 1.
// When the name is taken, the algorithm is registered under prefix and
// random letters and digits instead (strait_x7k2q9m1).
type PerProcess struct {
	prefix string
	opts   Options
	once   sync.Once
	alg    atomic.Pointer[Algorithm]
	err    error
}

// NewPerProcess describes the algorithm; nothing is loaded until Get.
func NewPerProcess(prefix string, opts Options) *PerProcess {
	return &PerProcess{prefix: prefix, opts: opts}
}

// Get registers the algorithm on its first call and returns it, or why the
// kernel cannot take it, on every call.
func (p *PerProcess) Get() (*Algorithm, error) {
	p.once.Do(func() {
		a, err := registerFree(p.prefix, strconv.Itoa(os.Getpid()), p.opts)
		if err != nil {
			p.err = err
			return
		}
		p.alg.Store(a)
	})
	return p.alg.Load(), p.err
}

// registerFree registers under prefix+first, or, while the kernel has an
// algorithm of that name, under prefix and a random suffix that fills the
// name to MaxNameLen: 36^7 names or more, so a few tries are plenty.
func registerFree(prefix, first string, opts Options) (*Algorithm, error) {
	a, err := Register(prefix+first, opts)
	for try := 0; errors.Is(err, syscall.EEXIST) && try < 4 && len(prefix) < MaxNameLen; try++ {
		a, err = Register(prefix+randomSuffix(MaxNameLen-len(prefix)), opts)
	}
	return a, err
}

func randomSuffix(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// Registered is the algorithm once Get has registered it and nil before:
// a reader of its counters that must not load it.
func (p *PerProcess) Registered() *Algorithm { return p.alg.Load() }
