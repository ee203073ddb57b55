package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/topology"
)

func init() {
	var opts lab.Options
	var scenarioName string
	up := &cobra.Command{
		Use:   "up FILE",
		Short: "Create the lab a topology file describes",
		Long: `Create every namespace, link, address and route of a topology file.
With --scenario, the scenario's impairments replace the file's link emulation
(see 'strait lab scenarios').`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topo, err := topology.Load(args[0])
			if err != nil {
				return err
			}
			plan, err := topo.Plan()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if scenarioName != "" {
				sc, err := scenario.Lookup(scenarioName)
				if err != nil {
					return err
				}
				sc.Apply(plan)
			}
			opts.Logger = logger()
			l, err := lab.Up(cmd.Context(), plan, opts)
			if err != nil {
				return err
			}
			return l.WriteStatus(cmd.OutOrStdout())
		},
	}
	up.Flags().StringVar(&opts.Emulator, "emulator", "", "emulation backend: auto, netem, userspace or tbf (rate-only links) (default: the file's, else auto)")
	up.Flags().StringVar(&scenarioName, "scenario", "", "apply a named scenario's impairments (e.g. edg10, cloud10)")

	var all bool
	var clustersFile string
	down := &cobra.Command{
		Use:   "down [NAME]",
		Short: "Remove a lab and everything it created (also after a crash)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var o lab.Options
			switch {
			case clustersFile != "":
				if len(args) > 0 || all {
					return errors.New("--clusters: removes every strait lab run from the clusters; it takes no NAME and no --all")
				}
				return downClusters(cmd.Context(), clustersFile)
			case all:
				return lab.DownAll(cmd.Context(), o)
			case len(args) == 1:
				return lab.Down(cmd.Context(), args[0], o)
			}
			name, err := onlyLab(cmd)
			if err != nil {
				return err
			}
			return lab.Down(cmd.Context(), name, o)
		},
	}
	down.Flags().BoolVar(&all, "all", false, "remove every lab")
	down.Flags().StringVar(&clustersFile, "clusters", "", "remove what any strait lab run left on the clusters of this file (docs/lab-clusters.md)")

	status := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show the labs that are up, or one lab's nodes and links",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := lab.List(cmd.Context(), lab.Options{})
			if err != nil {
				return err
			}
			if len(args) == 0 && len(names) != 1 {
				if len(names) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no lab is up")
				}
				for _, n := range names {
					fmt.Fprintln(cmd.OutOrStdout(), n)
				}
				return nil
			}
			name := names[0]
			if len(args) == 1 {
				name = args[0]
			}
			l, err := lab.Load(name, lab.Options{})
			if err != nil {
				return err
			}
			return l.WriteStatus(cmd.OutOrStdout())
		},
	}

	var labName string
	execCmd := &cobra.Command{
		Use:   "exec NODE -- COMMAND [ARG...]",
		Short: "Run a command on a lab node (cluster/node), like ip netns exec",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := labName
			if name == "" {
				var err error
				if name, err = onlyLab(cmd); err != nil {
					return err
				}
			}
			l, err := lab.Load(name, lab.Options{})
			if err != nil {
				return err
			}
			c, err := l.Command(cmd.Context(), args[0], args[1:]...)
			if err != nil {
				return err
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := c.Run(); err != nil {
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					os.Exit(exit.ExitCode())
				}
				return err
			}
			return nil
		},
	}
	execCmd.Flags().StringVar(&labName, "lab", "", "lab name (default: the only lab that is up)")

	labCmd.AddCommand(up, down, status, execCmd)
}

// onlyLab returns the name of the one lab that is up, for commands that may
// omit it.
func onlyLab(cmd *cobra.Command) (string, error) {
	names, err := lab.List(cmd.Context(), lab.Options{})
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", errors.New("no lab is up")
	}
	return "", fmt.Errorf("several labs are up (%v): name one", names)
}
