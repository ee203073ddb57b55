package main

import (
	"github.com/spf13/cobra"

	"github.com/strait-net/strait/agent"
)

func init() {
	var configPath string
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run a cluster's agent: publish its exports to the brokers, import the clusterset's into its gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(configPath)
			if err != nil {
				return err
			}
			cfg.Logger = logger()
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "agent configuration file (YAML, see agent/config.go)")
	_ = cmd.MarkFlagRequired("config")
	rootCmd.AddCommand(cmd)
}
