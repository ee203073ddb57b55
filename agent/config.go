package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/dnsname"
	"github.com/strait-net/strait/internal/strictyaml"
)

// Config is an agent's configuration file.
//
//	cluster: a                          # this cluster's ID, as in its certificate
//	identity: {dir: /etc/strait}        # a.crt, a.key, ca.crt (the gateway's identity serves)
//	brokers: [192.0.2.5:4500]           # where to start; the live set comes from the brokers
//	gateway: /run/strait/a.sock         # the gateway's admin socket: exports from it, imports to it
//	exports: exports.yaml               # or: exports from this file (ServiceExports), re-read on change
//	gateways: [192.0.2.10:4443]         # the WAN addresses peers dial (default: the gateway's own)
//	import-prefix: 10.96.0.0/16         # import addresses come from here ("" = do not apply imports)
//	poll: 100ms                         # how often the export source is checked for changes
//	trace: /tmp/a.trace                 # optional: one line per catalog change received (experiments)
type Config struct {
	Cluster      string        `yaml:"cluster"`
	Identity     IdentityFiles `yaml:"identity"`
	Brokers      []string      `yaml:"brokers"`
	Gateway      string        `yaml:"gateway"`
	Exports      string        `yaml:"exports"`
	Gateways     []string      `yaml:"gateways"`
	ImportPrefix string        `yaml:"import-prefix"`
	Poll         time.Duration `yaml:"poll"`
	Trace        string        `yaml:"trace"`

	Logger *slog.Logger `yaml:"-"`
}

// IdentityFiles locate the cluster's certificate, key and fabric CA.
type IdentityFiles struct {
	Dir  string `yaml:"dir"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// DefaultPoll is how often the export source is checked.
const DefaultPoll = 100 * time.Millisecond

func (c Config) poll() time.Duration {
	if c.Poll <= 0 {
		return DefaultPoll
	}
	return c.Poll
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if !dnsname.IsLabel(c.Cluster) {
		return fmt.Errorf("cluster: %q is not a DNS label", c.Cluster)
	}
	if c.Identity.Dir == "" && (c.Identity.Cert == "" || c.Identity.Key == "" || c.Identity.CA == "") {
		return errors.New("identity: dir, or cert, key and ca: required")
	}
	if len(c.Brokers) == 0 {
		return errors.New("brokers: need at least one broker address (host:port)")
	}
	for i, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("brokers[%d]: %q is not host:port", i, b)
		}
	}
	if c.Gateway == "" && c.Exports == "" {
		return errors.New("gateway or exports: required, the source of this cluster's exports")
	}
	if c.Gateway != "" && c.Exports != "" {
		return errors.New("gateway and exports: exclusive, exports come from the gateway or from a file")
	}
	if c.Gateway == "" && len(c.Gateways) == 0 {
		return errors.New("gateways: required without gateway (the addresses peers dial)")
	}
	p := catalog.Peer{Metadata: catalog.ObjectMeta{Name: c.Cluster}, Spec: catalog.PeerSpec{Gateways: c.Gateways}}
	if len(c.Gateways) > 0 {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("gateways: %w", err)
		}
	}
	if c.ImportPrefix != "" {
		pfx, err := netip.ParsePrefix(c.ImportPrefix)
		if err != nil {
			return fmt.Errorf("import-prefix: %q is not a CIDR prefix", c.ImportPrefix)
		}
		if !pfx.Addr().Is4() || pfx.Bits() > 30 {
			return fmt.Errorf("import-prefix: %s: want an IPv4 prefix of /30 or larger", c.ImportPrefix)
		}
		if c.Gateway == "" {
			return errors.New("import-prefix: needs gateway (imports are applied to it)")
		}
	}
	if c.Poll < 0 {
		return errors.New("poll: must be >= 0")
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
	for _, p := range []*string{&c.Identity.Dir, &c.Identity.Cert, &c.Identity.Key, &c.Identity.CA, &c.Exports, &c.Trace} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
