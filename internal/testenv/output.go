package testenv

import (
	"bytes"
	"sync"
)

// Output collects what a process or server writes while the test reads
// it: a bytes.Buffer behind a mutex, for a cmd.Stdout and a test that
// polls it.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
