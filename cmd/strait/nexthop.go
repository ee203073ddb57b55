package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/health"
	"github.com/strait-net/strait/lab/nexthop"
)

func init() {
	var (
		cfg     nexthop.Config
		route   string
		src     string
		members []string
	)
	watch := &cobra.Command{
		Use:   "nexthop-watch",
		Short: "on a client node: spread a route over the cluster's gateways with a resilient nexthop group, dropping dead ones",
		Long: `Install a resilient nexthop group for --route with one member per --member
(VIA,DEV,HEALTH: the gateway's address on the client's link, the client's
device, and the gateway's UDP health address), then probe every gateway's
health responder and rewrite the group whenever one dies or returns: only
the dead gateway's buckets move. Runs until interrupted; it carries no
traffic. For a gateway in the packet mode, HEALTH is VIA and the probe
port (4790 by default): its node's programs answer there, and they go on
forwarding the client's flows while the gateway process is dead
(docs/packet.md, "Health").`,
		Example: `  strait lab nexthop-watch --route 10.96.0.50/32 --member 10.200.128.1,lan-gw1,10.200.2.1:4444 --member 10.200.128.3,lan-gw2,10.200.2.2:4444`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Route, err = netip.ParsePrefix(route); err != nil {
				return fmt.Errorf("--route %q: want a prefix such as 10.96.0.50/32", route)
			}
			if src != "" {
				if cfg.Src, err = netip.ParseAddr(src); err != nil {
					return fmt.Errorf("--src %q: not an IP address", src)
				}
			}
			for _, m := range members {
				parts := strings.Split(m, ",")
				if len(parts) != 3 {
					return fmt.Errorf("--member %q: want VIA,DEV,HEALTH", m)
				}
				via, err := netip.ParseAddr(parts[0])
				if err != nil {
					return fmt.Errorf("--member %q: via %q is not an IP address", m, parts[0])
				}
				cfg.Members = append(cfg.Members, nexthop.Member{Via: via, Dev: parts[1], Health: parts[2]})
			}
			cfg.Logger = logger()
			w, err := nexthop.New(cfg)
			if err != nil {
				return err
			}
			return w.Run(cmd.Context())
		},
	}
	f := watch.Flags()
	f.StringVar(&route, "route", "", "destination prefix the group serves")
	f.StringVar(&src, "src", "", "source address for the route (the client node's own address)")
	f.StringArrayVar(&members, "member", nil, "VIA,DEV,HEALTH of one gateway (repeat)")
	f.IntVar(&cfg.ID, "id", 100, "nexthop group ID (members get ID+1, ID+2, …)")
	f.IntVar(&cfg.Buckets, "buckets", 128, "resilient group size")
	f.DurationVar(&cfg.IdleTimer, "idle-timer", 0, "idle time before a bucket may move to a returning gateway (default 1s)")
	f.DurationVar(&cfg.Interval, "interval", 0, "health probe interval (default 5ms)")
	f.IntVar(&cfg.Misses, "misses", 0, "missed probes that make a gateway dead (default 200: 1s at 5ms)")

	var listen string
	respond := &cobra.Command{
		Use:   "health-respond",
		Short: "answer health probes on a UDP address (what a gateway's health: setting runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := health.NewResponder(health.ResponderConfig{Addr: listen})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "health responder listening on %s\n", r.Addr())
			return r.Run(cmd.Context())
		},
	}
	respond.Flags().StringVar(&listen, "listen", ":4444", "UDP address")
	labCmd.AddCommand(watch, respond)
}
