// Command strait is the interconnect and the lab in one binary. This package
// only wires flags to the components; the work happens in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// rootCmd is the top of the command tree; each file of this package adds its
// commands to it (or to labCmd, appCmd, loadCmd) in an init function.
var rootCmd = &cobra.Command{
	Use:           "strait",
	Short:         "Connect services across Kubernetes clusters, and measure what it costs",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       version,
}

var labCmd = group(&cobra.Command{
	Use:   "lab",
	Short: "Build clusters as network namespaces on this host and run experiments",
})

var appCmd = group(&cobra.Command{
	Use:   "app",
	Short: "Run one of the lab's workload servers (echo, recv, static, hello)",
})

var loadCmd = group(&cobra.Command{
	Use:   "load",
	Short: "Generate load against a workload and record every request",
})

func init() {
	rootCmd.AddCommand(labCmd, appCmd, loadCmd)
}

// group makes a command that only holds subcommands fail on an unknown
// subcommand, instead of printing help and exiting 0 as cobra would.
func group(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	return c
}

// logger is the process-wide structured logger; commands pass it down.
func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "strait:", err)
		}
		os.Exit(1)
	}
}
