package k8s

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/strait-net/strait/internal/dnsname"
	"k8s.io/client-go/rest"
)

// Config configures a Controller.
type Config struct {
	// Cluster is this cluster's ID, a DNS label, as in its certificate.
	Cluster string
	// REST reaches the API server.
	REST *rest.Config
	// Clusterset is the broker; required unless SyncOnly.
	Clusterset Clusterset
	// ClustersetIPs is the range clusterset IPs are allocated from
	// ("" means DefaultClustersetIPs). Gateways must be able to listen on
	// every address of it (a local route, see the README).
	ClustersetIPs string
	// GatewayWAN are the addresses peer gateways dial (host:port),
	// published to the broker.
	GatewayWAN []string
	// GatewayIPs are the in-cluster addresses of this cluster's gateways:
	// the endpoints of imported services' EndpointSlices.
	GatewayIPs []string
	// GatewayAdmin are the gateways' admin sockets the derived
	// configuration is pushed to; none means no push.
	GatewayAdmin []string
	// SyncOnly makes the controller only read the cluster's objects and
	// push gateway configuration (the sidecar of a gateway pod): it
	// writes nothing to the API server and needs no broker.
	SyncOnly bool
	// LeaderElection lets several replicas run with one active;
	// LeaderElectionNamespace holds its Lease.
	LeaderElection          bool
	LeaderElectionNamespace string
	// PublishTimeout bounds one publish to the broker (0: 10s).
	PublishTimeout time.Duration
	Logger         *slog.Logger
}

// DefaultClustersetIPs is the default ClustersetIPs.
const DefaultClustersetIPs = "10.255.0.0/16"

// Validate names the first bad field.
func (c Config) Validate() error {
	if !dnsname.IsLabel(c.Cluster) {
		return fmt.Errorf("cluster: %q is not a DNS label (lowercase letters, digits, '-', at most 63)", c.Cluster)
	}
	if c.REST == nil {
		return errors.New("rest: required (a kubeconfig or the in-cluster configuration)")
	}
	if c.Clusterset == nil && !c.SyncOnly {
		return errors.New("clusterset: required (a broker) unless sync-only")
	}
	if _, err := c.clustersetIPs(); err != nil {
		return err
	}
	for i, a := range c.GatewayWAN {
		if _, err := netip.ParseAddrPort(a); err != nil {
			if _, _, err2 := net.SplitHostPort(a); err2 != nil {
				return fmt.Errorf("gateway-wan[%d]: %q: want host:port", i, a)
			}
		}
	}
	for i, a := range c.GatewayIPs {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("gateway-ips[%d]: %q is not an IP address", i, a)
		}
	}
	if c.LeaderElection && c.LeaderElectionNamespace == "" {
		return errors.New("leader-election-namespace: required with leader election")
	}
	return nil
}

func (c Config) clustersetIPs() (netip.Prefix, error) {
	s := c.ClustersetIPs
	if s == "" {
		s = DefaultClustersetIPs
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("clusterset-ips: %q is not a CIDR (e.g. %s)", s, DefaultClustersetIPs)
	}
	if p.Addr().Is4() && p.Bits() > 30 || p.Addr().Is6() && p.Bits() > 126 {
		return netip.Prefix{}, fmt.Errorf("clusterset-ips: %s holds no host addresses", s)
	}
	return p.Masked(), nil
}

func (c Config) publishTimeout() time.Duration {
	if c.PublishTimeout > 0 {
		return c.PublishTimeout
	}
	return 10 * time.Second
}
