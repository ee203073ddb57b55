package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/apps"
)

func init() {
	for _, k := range apps.Kinds {
		appCmd.AddCommand(newAppCmd(k))
	}
}

var appShort = map[apps.Kind]string{
	apps.Echo:   "Answer every request with its body (seed 000 payload-echo)",
	apps.Recv:   "Read and discard the body, answer 200 with no body (seed 000 payload-recv)",
	apps.Static: "Answer every request with a fixed 1000-byte body (seed 000 static-reply)",
	apps.Hello:  `Answer every request with "Hello, World!" (seed 001 hello-world)`,
	apps.Peer:   `Answer every request with its source address and print "peer ADDRESS PATH" (the lab on clusters asks it which address another cluster's pods have)`,
}

func newAppCmd(kind apps.Kind) *cobra.Command {
	cfg := apps.Config{Kind: kind}
	var heapLimit int64
	var procs string
	cmd := &cobra.Command{
		Use:   string(kind),
		Short: appShort[kind],
		Long: appShort[kind] + ".\n\nAn HTTP/1.1 server with keep-alive; any method, any path. " +
			"Bodies larger than --max-body get 413. It prints one line once listening and stops gracefully on SIGINT or SIGTERM.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyHeapLimit(heapLimit); err != nil {
				return err
			}
			if err := applyProcs(cmd.Context(), procs); err != nil {
				return err
			}
			cfg.Logger = logger()
			if kind == apps.Peer {
				cfg.Peers = cmd.OutOrStdout()
			}
			srv, err := apps.Listen(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "strait app %s listening on %s\n", kind, srv.Addr())
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", apps.DefaultListen, "TCP address to listen on, host:port (port 0 picks a free port)")
	f.Int64Var(&cfg.MaxBody, "max-body", apps.DefaultMaxBody, "largest request body accepted, in bytes")
	if kind == apps.Static {
		f.IntVar(&cfg.StaticSize, "size", apps.DefaultStaticSize, "size of the reply body in bytes")
	}
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", apps.DefaultIdleTimeout, "close keep-alive connections idle this long")
	addHeapLimitFlag(f, &heapLimit)
	addProcsFlag(f, &procs, procsAuto)
	return cmd
}
