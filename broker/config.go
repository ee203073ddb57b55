package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/strait-net/strait/internal/dnsname"
	"github.com/strait-net/strait/internal/strictyaml"
)

// Config is a broker's configuration file.
//
//	id: broker-1                      # this broker's ID: the name in its broker certificate
//	identity: {dir: /etc/strait}      # broker-1.crt/.key and ca.crt from `strait fabric issue --broker broker-1`
//	listen: 0.0.0.0:4500              # where agents connect
//	advertise: 192.0.2.5:4500         # the address agents dial (default: listen)
//	store: {path: /var/lib/strait/broker.db}               # embedded (bbolt), one broker
//	store: {etcd: [http://10.0.0.1:2379], prefix: /strait/} # shared etcd, several brokers
type Config struct {
	ID        string        `yaml:"id"`
	Identity  IdentityFiles `yaml:"identity"`
	Listen    string        `yaml:"listen"`
	Advertise string        `yaml:"advertise"`
	Store     StoreConfig   `yaml:"store"`

	Logger *slog.Logger `yaml:"-"`
}

// IdentityFiles locate the broker's certificate, key and fabric CA.
type IdentityFiles struct {
	Dir  string `yaml:"dir"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// StoreConfig picks the store: Path for the embedded one, Etcd for etcd.
type StoreConfig struct {
	// Path is the bbolt file of the embedded store.
	Path string `yaml:"path"`
	// Etcd lists etcd client URLs; then Path must be empty.
	Etcd []string `yaml:"etcd"`
	// Prefix namespaces keys in etcd (default /strait/).
	Prefix string `yaml:"prefix"`
	// MaxTxnOps is etcd's --max-txn-ops (default 128).
	MaxTxnOps int `yaml:"max-txn-ops"`
	// History is how many revisions the embedded store keeps for resuming
	// agents (default DefaultHistory); etcd keeps what its compaction keeps.
	History int `yaml:"history"`
	// LeaseTTL is how long a dead broker stays a member with etcd (its
	// lease), whole seconds; default 2s. Agents do not wait for it: they
	// fail over at once; the assignment follows when it expires.
	LeaseTTL time.Duration `yaml:"lease-ttl"`
}

// DefaultListen is where a broker listens when the config says nothing.
const DefaultListen = ":4500"

func (c Config) listen() string {
	if c.Listen == "" {
		return DefaultListen
	}
	return c.Listen
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if !dnsname.IsLabel(c.ID) {
		return fmt.Errorf("id: %q is not a DNS label (the cluster ID in the broker's certificate)", c.ID)
	}
	if c.Identity.Dir == "" && (c.Identity.Cert == "" || c.Identity.Key == "" || c.Identity.CA == "") {
		return errors.New("identity: dir, or cert, key and ca: required")
	}
	switch {
	case c.Store.Path != "" && len(c.Store.Etcd) > 0:
		return errors.New("store: path and etcd are exclusive: the embedded store or etcd")
	case c.Store.Path == "" && len(c.Store.Etcd) == 0:
		return errors.New("store: path (embedded store file) or etcd (client URLs): required")
	}
	if c.Store.MaxTxnOps < 0 || c.Store.History < 0 {
		return errors.New("store: max-txn-ops and history: must be >= 0")
	}
	if c.Store.LeaseTTL != 0 && (len(c.Store.Etcd) == 0 || c.Store.LeaseTTL < time.Second || c.Store.LeaseTTL%time.Second != 0) {
		return fmt.Errorf("store: lease-ttl %v: etcd leases only, whole seconds >= 1s", c.Store.LeaseTTL)
	}
	return nil
}

// LoadConfig reads a configuration file; relative paths in it are taken
// relative to the file.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := strictyaml.Decode(b, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.Identity.Dir, &c.Identity.Cert, &c.Identity.Key, &c.Identity.CA, &c.Store.Path} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
