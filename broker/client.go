package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Brokers are host:port addresses of brokers to start from; the client
	// learns the live set and its RBCM assignment from the brokers and
	// moves between them (see agent placement in the package comment).
	Brokers []string
	// TLS is the fabric client configuration, fabric.Identity.ClientTLS(""):
	// brokers present clusterset certificates like gateways do.
	TLS *tls.Config
	// Cluster is the local cluster ID; it must be the ID in the
	// certificate TLS presents, or the broker refuses every write.
	Cluster string
	// OnUpdate receives the catalog: one snapshot first, then deltas, in
	// revision order, from one goroutine. It must not block for long: the
	// client reads no further frames while it runs. Nil means the caller
	// only publishes.
	OnUpdate func(Update)
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// Validate names the first missing or bad field.
func (c ClientConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("brokers: need at least one broker address")
	}
	if c.TLS == nil {
		return errors.New("tls: required (the fabric identity's ClientTLS)")
	}
	if c.Cluster == "" {
		return errors.New("cluster: required")
	}
	return nil
}

// Client is one cluster's connection to the broker layer. Create it with
// NewClient, start Run, then Publish whenever the cluster's state changes.
type Client struct {
	cfg ClientConfig
	log *slog.Logger
}

// NewClient checks cfg; it opens no connection (Run does).
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("broker client: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, log: log}, nil
}

// Run keeps a connection to the assigned broker (failing over to another
// when it dies, resuming from the last revision seen) until ctx is done or
// Close is called; it returns after its goroutines exit.
func (c *Client) Run(ctx context.Context) error {
	return errors.New("broker client: not implemented yet")
}

// Publish replaces this cluster's published state with st and returns the
// catalog revision that holds it. It is idempotent: publishing an equal
// state changes nothing. While no broker is reachable it blocks until one
// is or ctx ends; the latest state passed is what gets published.
func (c *Client) Publish(ctx context.Context, st ClusterState) (uint64, error) {
	return 0, errors.New("broker client: not implemented yet")
}

// Catalog returns a copy of the current view of the clusterset and whether
// the client has received a snapshot yet.
func (c *Client) Catalog() (*Catalog, bool) {
	return nil, false
}

// Close stops Run; it is idempotent.
func (c *Client) Close() error { return nil }
