package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/k8s"
)

func init() {
	var (
		cfg        k8s.Config
		kubeconfig string
		brokers    []string
		identity   string
	)
	cmd := &cobra.Command{
		Use:   "controller --cluster ID [--broker HOST:PORT --identity DIR] [--gateway-admin SOCKET]",
		Short: "Run the Kubernetes controller: MCS ServiceExport/ServiceImport, the broker, gateway configuration",
		Long: `The controller implements the Multi-Cluster Services API in one cluster: it sets the
Valid, Ready and Conflict conditions of ServiceExports, publishes valid exports to the
broker, creates a ServiceImport (with a stable clusterset IP) and EndpointSlices for every
service other clusters export, writes a Peer per cluster, and pushes the gateway
configuration derived from these objects to the gateways' admin sockets.

With --sync-only it only pushes gateway configuration (a gateway pod's sidecar).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			if kubeconfig != "" {
				cfg.REST, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			} else {
				cfg.REST, err = ctrlconfig.GetConfig() // $KUBECONFIG, in-cluster, ~/.kube/config
			}
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			cfg.Logger = logger()
			var wg sync.WaitGroup
			ctx, cancel := context.WithCancel(ctx)
			defer func() { cancel(); wg.Wait() }()
			if !cfg.SyncOnly {
				if len(brokers) == 0 || identity == "" {
					return fmt.Errorf("--broker and --identity: required unless --sync-only")
				}
				id, err := fabric.Load(fabric.Config{Dir: identity, Cluster: cfg.Cluster, Logger: cfg.Logger})
				if err != nil {
					return fmt.Errorf("identity: %w", err)
				}
				cs, err := k8s.NewBrokerClusterset(broker.ClientConfig{Brokers: brokers, TLS: id.BrokerClientTLS(),
					Cluster: cfg.Cluster, Logger: cfg.Logger})
				if err != nil {
					return err
				}
				defer cs.Close()
				cfg.Clusterset = cs
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := cs.Run(ctx); err != nil && ctx.Err() == nil {
						cfg.Logger.Error("broker client ended", "err", err)
						cancel()
					}
				}()
			}
			c, err := k8s.New(cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Cluster, "cluster", "", "this cluster's ID (a DNS label, as in its fabric certificate)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	f.StringSliceVar(&brokers, "broker", nil, "broker address host:port (repeatable)")
	f.StringVar(&identity, "identity", "", "directory with the cluster's fabric certificate, key and ca.crt (for the broker)")
	f.StringVar(&cfg.ClustersetIPs, "clusterset-ips", k8s.DefaultClustersetIPs, "CIDR clusterset IPs are allocated from")
	f.StringSliceVar(&cfg.GatewayWAN, "gateway-wan", nil, "host:port peer gateways dial, published to the broker (repeatable)")
	f.StringSliceVar(&cfg.GatewayIPs, "gateway-ips", nil, "in-cluster IPs of this cluster's gateways: imported services' endpoints (repeatable)")
	f.StringSliceVar(&cfg.GatewayAdmin, "gateway-admin", nil, "gateway admin socket to push configuration to (repeatable)")
	f.BoolVar(&cfg.SyncOnly, "sync-only", false, "only push gateway configuration; write nothing to the API server")
	f.BoolVar(&cfg.LeaderElection, "leader-election", false, "elect one active replica (a Lease in --leader-election-namespace)")
	f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease")
	_ = cmd.MarkFlagRequired("cluster")
	rootCmd.AddCommand(cmd)
}
