package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/linkemu/nodeemu"
)

func init() {
	var (
		run, spec, ready, probe string
		remote                  []string
		clean                   bool
		seed                    uint64
		resetPorts              []uint
	)
	cmd := &cobra.Command{
		Use:    "node-emulate --run RUN --remote PREFIX,... --emulation JSON",
		Short:  "Impair this node's egress toward other clusters (the lab's DaemonSet pod on clusters)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger().With("component", "node-emulate")
			switch {
			case probe != "":
				// The pod's readiness probe: the agent writes the file
				// once the emulation is in place.
				if _, err := os.Stat(probe); err != nil {
					return fmt.Errorf("emulation not in place: %w", err)
				}
				return nil
			case clean:
				removed, err := nodeemu.Clean(run)
				log.Info("cleaned", "run", run, "removed", removed)
				if err != nil {
					return err
				}
				left, err := nodeemu.Leftovers(run)
				if err == nil && len(left) > 0 {
					err = fmt.Errorf("devices left after cleaning: %s", strings.Join(left, ", "))
				}
				if err != nil {
					return err
				}
				if ready == "" {
					return nil
				}
				// In a pod: report, then wait to be deleted (a
				// DaemonSet restarts containers that exit).
				if err := os.WriteFile(ready, []byte("clean\n"), 0o644); err != nil {
					return err
				}
				<-cmd.Context().Done()
				return nil
			}
			var s emulation.Spec
			if err := json.Unmarshal([]byte(spec), &s); err != nil {
				return fmt.Errorf("--emulation: %w", err)
			}
			p, err := s.Params()
			if err != nil {
				return fmt.Errorf("--emulation: %w", err)
			}
			var prefixes []netip.Prefix
			for _, r := range remote {
				pfx, err := netip.ParsePrefix(strings.TrimSpace(r))
				if err != nil {
					return fmt.Errorf("--remote %q: not a prefix (use e.g. 10.101.0.0/16): %w", r, err)
				}
				prefixes = append(prefixes, pfx)
			}
			// The userspace emulator's locked sleeping threads need
			// spare Ps (see `strait lab emulate`).
			runtime.GOMAXPROCS(runtime.NumCPU() + 4)
			var ports []uint16
			for _, port := range resetPorts {
				if port == 0 || port > 65535 {
					return fmt.Errorf("--reset-ports %d: want a TCP port, 1..65535", port)
				}
				ports = append(ports, uint16(port))
			}
			err = nodeemu.Run(cmd.Context(), nodeemu.Config{Run: run, Remote: prefixes, Params: p, Seed: seed, ResetPorts: ports, Ready: ready, Logger: log})
			if err != nil {
				// Kubernetes shows this file as the container's
				// termination message (linkemu's errors quote it).
				_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "the lab run; names the devices (with --clean, \"\" = every run)")
	cmd.Flags().StringSliceVar(&remote, "remote", nil, "destination prefixes whose traffic is impaired")
	cmd.Flags().StringVar(&spec, "emulation", "", `the impairment as JSON, e.g. {"delay":"5ms","rate":"100mbit"}`)
	cmd.Flags().StringVar(&ready, "ready", "", "file written once the emulation is in place")
	cmd.Flags().StringVar(&probe, "probe", "", "only check that this ready file exists (a readiness probe)")
	cmd.Flags().BoolVar(&clean, "clean", false, "remove the devices crashed agents of --run left (with --ready: then report and wait)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "userspace emulator seed (0 = random)")
	cmd.Flags().UintSliceVar(&resetPorts, "reset-ports", nil, "once in place, end this node's TCP connections toward --remote with a local or peer port among these")
	labCmd.AddCommand(cmd)
}
