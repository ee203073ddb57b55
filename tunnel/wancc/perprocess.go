package wancc

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// PerProcess is an Algorithm registered on first use under prefix followed
// by the process ID (strait_1234): the kernel drops it when the process
// exits, and processes sharing a kernel (the lab's gateways) each hold
// their own.
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
		a, err := Register(p.prefix+strconv.Itoa(os.Getpid()), p.opts)
		if err != nil {
			p.err = err
			return
		}
		p.alg.Store(a)
	})
	return p.alg.Load(), p.err
}

// Registered is the algorithm once Get has registered it and nil before:
// a reader of its counters that must not load it.
func (p *PerProcess) Registered() *Algorithm { return p.alg.Load() }
