package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/packet"
)

// packetFlags binds the packet.Config fields that the commands share.
func packetFlags(cmd *cobra.Command, cfg *packet.Config, snat *string) {
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "the gateway's name: its pins live in PIN-ROOT/NAME (required)")
	f.StringVar(&cfg.PinRoot, "pin-root", packet.DefaultPinRoot, "a directory on a bpffs mount (`ip netns exec` hides /sys/fs/bpf: mount one elsewhere)")
	f.StringVar(&cfg.Tunnel, "tunnel", "", `the VXLAN device (default "stv-" and the name)`)
	if snat == nil {
		return
	}
	f.StringVar(&cfg.LAN, "lan", "", "the interface toward the cluster's nodes (required)")
	f.StringVar(snat, "snat", "", "the address exported flows leave with toward their targets (exporting gateways)")
	f.Uint16Var(&cfg.TunnelPort, "port", packet.DefaultTunnelPort, "VXLAN UDP port")
	f.Uint32Var(&cfg.VNI, "vni", packet.DefaultVNI, "VXLAN network identifier")
	f.IntVar(&cfg.UnderlayMTU, "underlay-mtu", packet.DefaultUnderlayMTU, "MTU between gateways: SYNs are clamped to this minus 90")
}

func init() {
	parent := group(&cobra.Command{
		Use:   "packet",
		Short: "The kernel packet data plane on this gateway node: attach, inspect, tear down (docs/packet.md)",
	})

	var cfg packet.Config
	var snat string
	attach := &cobra.Command{
		Use:   "attach --name NAME --lan IF [--snat ADDR]",
		Short: "Load the programs, create the VXLAN device and attach through pinned links (adopting what is pinned); they keep forwarding after this command exits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if snat != "" {
				a, err := netip.ParseAddr(snat)
				if err != nil {
					return fmt.Errorf("--snat %q: not an IP address", snat)
				}
				cfg.SNAT = a
			}
			d, err := packet.Load(cfg, logger())
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Attach(cmd.Context())
		},
	}
	packetFlags(attach, &cfg, &snat)

	var tcfg packet.Config
	teardown := &cobra.Command{
		Use:   "teardown --name NAME",
		Short: "Detach the programs and remove the gateway's pins and VXLAN device (run it in the gateway node's network namespace)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return packet.Teardown(cmd.Context(), tcfg)
		},
	}
	packetFlags(teardown, &tcfg, nil)

	var ccfg packet.Config
	counters := &cobra.Command{
		Use:   "counters --name NAME",
		Short: "Print the programs' counters as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := packet.Load(ccfg, logger())
			if err != nil {
				return err
			}
			defer d.Close()
			c, err := d.Counters()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(c)
		},
	}
	packetFlags(counters, &ccfg, nil)

	var acfg packet.Config
	var file string
	apply := &cobra.Command{
		Use:   "apply --name NAME -f FILE",
		Short: "Make the gateway's maps hold exactly the state in FILE (YAML: clusters, imports, exports, peers, policy; see packet/state.go)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f: required (the state file, or - for standard input)")
			}
			in := cmd.InOrStdin()
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			st, err := packet.ParseState(in)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			d, err := packet.Load(acfg, logger())
			if err != nil {
				return err
			}
			defer d.Close()
			return st.Apply(d)
		},
	}
	packetFlags(apply, &acfg, nil)
	apply.Flags().StringVarP(&file, "file", "f", "", "the state file (- for standard input)")

	parent.AddCommand(attach, apply, teardown, counters)
	rootCmd.AddCommand(parent)
}
