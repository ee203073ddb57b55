// Package apps holds the lab's workload servers: the HTTP functions the seed
// papers deploy in the serving cluster (seed 000's payload-echo, payload-recv
// and static-reply, seed 001's hello-world). They are deliberately trivial so
// that what a run measures is the network and the tool under test, not the
// application: HTTP/1.1 keep-alive as JMeter expects, served by this
// package's own reader and writer (http1.go says why), with no logging and
// no allocation per request.
package apps

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind names a workload.
type Kind string

// The workloads. Every kind answers any method on any path.
const (
	// Echo answers 200 with the request body, byte for byte, with
	// Content-Length set (seed 000 payload-echo, seed 001 payload-echo).
	Echo Kind = "echo"
	// Recv reads and discards the request body and answers 200 with an
	// empty body (seed 000 payload-recv).
	Recv Kind = "recv"
	// Static answers 200 with a fixed body of StaticSize bytes whatever the
	// request carried (seed 000 static-reply, 1000 bytes).
	Static Kind = "static"
	// Hello answers 200 with "Hello, World!" (seed 001 hello-world).
	Hello Kind = "hello"
	// Peer answers 200 with the address the request came from as this
	// server saw it, and writes it to Config.Peers. It is no seed's
	// workload: lab/kube asks a pod in one cluster which source address a
	// pod of another cluster has there (docs/lab-clusters.md, "Where").
	Peer Kind = "peer"
)

// Kinds lists every workload, in the order help texts show them.
var Kinds = []Kind{Echo, Recv, Static, Hello, Peer}

// HelloBody is what the hello workload answers.
const HelloBody = "Hello, World!"

// Defaults used where Config leaves a field zero.
const (
	DefaultListen          = ":8080"
	DefaultMaxBody         = 64 << 20
	DefaultStaticSize      = 1000
	DefaultShutdownTimeout = 5 * time.Second
	DefaultIdleTimeout     = 120 * time.Second
)

// Config describes one workload server. The zero value is an echo server on
// DefaultListen.
type Config struct {
	// Kind is the workload: echo, recv, static or hello. Empty means echo.
	Kind Kind
	// Listen is the TCP address to listen on, host:port; port 0 picks a free
	// port (see Server.Addr). Empty means DefaultListen.
	Listen string
	// MaxBody is the largest request body accepted, in bytes; larger bodies
	// get 413 and the connection is closed. Zero means DefaultMaxBody.
	MaxBody int64
	// StaticSize is the size of the static workload's body in bytes. Zero
	// means DefaultStaticSize (seed 000's 1000 bytes).
	StaticSize int
	// IdleTimeout closes keep-alive connections idle for this long. Zero
	// means DefaultIdleTimeout; it must outlast any think time of a load
	// generator, or the load generator pays reconnections.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown when Run's context ends;
	// connections still busy after it are closed. Zero means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives start and stop messages and server errors; nil
	// discards them.
	Logger *slog.Logger
	// Peers receives, for the peer workload, a line "peer ADDRESS PATH"
	// per request: its source address and path, so that whoever runs the
	// server learns the address without being the client. Nil: nowhere.
	Peers io.Writer
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Kind != "" && !validKind(c.Kind) {
		return fmt.Errorf("kind %q: must be one of %s", c.Kind, kindList())
	}
	if c.Listen != "" {
		_, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: want host:port: %w", c.Listen, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("listen %q: port must be a number 0-65535", c.Listen)
		}
	}
	if c.MaxBody < 0 {
		return fmt.Errorf("max body %d: must not be negative", c.MaxBody)
	}
	if c.StaticSize < 0 {
		return fmt.Errorf("static size %d: must not be negative", c.StaticSize)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("idle timeout %v: must not be negative", c.IdleTimeout)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown timeout %v: must not be negative", c.ShutdownTimeout)
	}
	return nil
}

func validKind(k Kind) bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = Echo
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.StaticSize == 0 {
		c.StaticSize = DefaultStaticSize
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// StaticBody returns the static workload's body of n bytes: printable,
// deterministic text, so a capture or a client can check it.
func StaticBody(n int) []byte {
	const line = "strait static reply 0123456789 abcdefghijklmnopqrstuvwxyz\n"
	b := bytes.Repeat([]byte(line), n/len(line)+1)
	return b[:n]
}

// peerLog writes the peer workload's line per request to Config.Peers.
type peerLog struct {
	mu  sync.Mutex
	out io.Writer
}

func (l *peerLog) report(host, path string) {
	if l.out == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The path goes out quoted: a line per request whatever it holds.
	_, _ = fmt.Fprintf(l.out, "peer %s %q\n", host, path)
}
