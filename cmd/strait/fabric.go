package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strait-net/strait/fabric"
)

var fabricCmd = &cobra.Command{
	Use:   "fabric",
	Short: "Manage the clusterset CA and the gateways' certificates",
	Long: "The fabric is the clusterset's identity: one CA, and per cluster a certificate naming the cluster\n" +
		"(URI SAN spiffe://<clusterset>/cluster/<id>) that its gateways present to each other over mutual TLS.",
}

func init() {
	rootCmd.AddCommand(fabricCmd)
	fabricCmd.AddCommand(newFabricInitCmd(), newFabricIssueCmd())
}

func newFabricInitCmd() *cobra.Command {
	var (
		dir, clusterset string
		lifetime        time.Duration
		force           bool
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR --clusterset NAME",
		Short: "Create the clusterset CA (ca.crt, ca.key) in DIR",
		Long: "Create a self-signed ECDSA P-256 CA for the clusterset: DIR/ca.crt and DIR/ca.key (mode 0600).\n" +
			"An existing CA is never replaced unless --force is given: every certificate it issued would stop working.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir: required")
			}
			if clusterset == "" {
				return errors.New("--clusterset: required, a DNS label")
			}
			ca, err := fabric.InitDir(dir, clusterset, lifetime, force)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "clusterset %s: CA written to %s (valid until %s)\n",
				ca.Clusterset, dir, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory for ca.crt and ca.key (created if missing)")
	f.StringVar(&clusterset, "clusterset", "", "clusterset name, a DNS label")
	f.DurationVar(&lifetime, "lifetime", fabric.DefaultCALifetime, "how long the CA is valid")
	f.BoolVar(&force, "force", false, "replace an existing CA")
	return cmd
}

func newFabricIssueCmd() *cobra.Command {
	var (
		dir, out string
		lifetime time.Duration
		broker   bool
	)
	cmd := &cobra.Command{
		Use:   "issue [--broker] NAME --dir DIR [--out DIR]",
		Short: "Issue the certificate of a cluster's gateways, or of a broker",
		Long: "Issue a key and certificate for the gateways of cluster NAME (a DNS label) from the CA in --dir:\n" +
			"writes NAME.crt, NAME.key (mode 0600) and a copy of ca.crt to --out. Issuing again rotates\n" +
			"the certificate; running gateways pick up the new files without dropping connections.\n" +
			"With --broker the certificate is broker NAME's (URI SAN spiffe://<clusterset>/broker/NAME):\n" +
			"agents accept only such a certificate from a broker, and no one accepts it as a cluster.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errors.New("--dir: required, the directory of `strait fabric init`")
			}
			issue, what := fabric.IssueFiles, "cluster"
			if broker {
				issue, what = fabric.IssueBrokerFiles, "broker"
			}
			iss, err := issue(dir, out, args[0], lifetime)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: wrote %s, %s, %s (valid until %s)\n",
				what, args[0], iss.Cert, iss.Key, iss.CA, iss.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory holding the clusterset CA")
	f.StringVar(&out, "out", "", "directory to write the cluster's files to (default: --dir)")
	f.BoolVar(&broker, "broker", false, "issue a broker's certificate (spiffe://<clusterset>/broker/NAME)")
	f.DurationVar(&lifetime, "lifetime", fabric.DefaultCertLifetime, "how long the certificate is valid")
	return cmd
}
