package tool

import (
	"context"
	"net"
	"strconv"
)

func init() { Register("direct", func() Tool { return &direct{} }) }

// direct is the baseline: plain routing between the clusters over the same
// links every other tool uses, no tunnel, no proxy, no encryption.
type direct struct{}

func (*direct) Name() string { return "direct" }

func (*direct) Setup(_ context.Context, env Env) (map[string]string, error) {
	targets := make(map[string]string, len(env.Services))
	for _, s := range env.Services {
		targets[s.Name] = net.JoinHostPort(env.Server.Addr.String(), strconv.Itoa(s.Port))
	}
	return targets, nil
}

func (*direct) Teardown(context.Context) error { return nil }

func (*direct) Version(context.Context) string { return "kernel routing" }
