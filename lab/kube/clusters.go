// Package kube runs lab experiments on Kubernetes clusters instead of
// network namespaces of this host (docs/lab-clusters.md): the workloads as
// Deployments with Services in a namespace per unit, the load generator in a
// pod of the client's cluster, the tools direct, strait and installed. It
// is a run.Backend: lab/run keeps units, resume, progress, aggregation and
// the report, so a cell means the same in both labs.
package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/strait-net/strait/internal/strictyaml"
)

// ClusterMap is a clusters file: which kubeconfig context is which of the
// experiment's clusters, and how the tools reach services.
//
//	clusters:
//	  a: {kubeconfig: a.kubeconfig, context: kind-a}
//	  b: {kubeconfig: /home/me/.kube/config, context: kind-b, remote: [10.96.0.0/12]}
//	direct: auto            # auto, pod or nodeport
//	image: ghcr.io/strait-net/strait:v0.3.0
//	installed: "{service}.{namespace}.svc.clusterset.local"
//	sessions: reset         # reset or keep
type ClusterMap struct {
	Clusters map[string]Cluster `yaml:"clusters"`
	// Direct is how the direct tool reaches the server: pod (the pod's IP,
	// when the clusters route pod networks to each other), nodeport (a
	// NodePort Service on a node's address) or auto (pod where a probe
	// from the client's pod answers, else nodeport). Empty: auto.
	Direct string `yaml:"direct"`
	// Installed is the name template the installed tool dials: {service}
	// and {namespace} are replaced by the workload's. Empty: the tool
	// installed is refused.
	Installed string `yaml:"installed"`
	// Image is the image of the workloads and the load generator: strait's
	// (the lab's apps and load generators are strait subcommands), at a
	// tag the clusters can pull. Empty: Image.
	Image string `yaml:"image"`
	// Export, when true, has the installed tool create an MCS
	// ServiceExport (multicluster.x-k8s.io) for every workload, as
	// Submariner needs; strait's tool always does.
	Export bool `yaml:"export"`
	// Sessions is what an emulated unit does with the strait gateways'
	// sessions between the clusters when the strait tool runs: reset
	// (the default) ends them once the emulation is in place, so that they
	// start over on the emulated path as in the namespace lab, where the
	// gateways start after the links are emulated; keep leaves them as
	// they are, carrying what they learnt of the path before
	// (docs/lab-clusters.md, "Measured").
	Sessions string `yaml:"sessions"`

	dir string // where relative kubeconfig paths are resolved
}

// Cluster is one cluster's entry.
type Cluster struct {
	// Kubeconfig is a kubeconfig file, relative to the clusters file; empty:
	// the usual rules ($KUBECONFIG, else ~/.kube/config).
	Kubeconfig string `yaml:"kubeconfig"`
	// Context is the kubeconfig context; empty: its current context.
	Context string `yaml:"context"`
	// Remote lists addresses or prefixes the cluster's traffic has on the
	// other clusters' nodes besides what a run finds itself: its nodes'
	// addresses and pod CIDRs (the API reports them) and its source
	// address as the other cluster sees it (the address its nodes
	// masquerade pod traffic to, asked of a pod there): e.g. a Service
	// CIDR, or a source address where no pod of the other cluster can be
	// asked. Link emulation impairs the other clusters' egress toward
	// them too (docs/lab-clusters.md, "Link emulation").
	Remote []string `yaml:"remote"`

	remote []netip.Prefix
}

// Direct modes.
const (
	DirectAuto     = "auto"
	DirectPod      = "pod"
	DirectNodePort = "nodeport"
)

// Sessions modes (ClusterMap.Sessions).
const (
	SessionsReset = "reset"
	SessionsKeep  = "keep"
)

var clusterRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ParseClusterMap decodes a clusters file strictly: unknown fields, a
// cluster name that is not a DNS label, an unknown direct mode and an
// installed template without {service} and an unknown sessions mode are
// errors. dir resolves relative
// kubeconfig paths.
func ParseClusterMap(b []byte, dir string) (*ClusterMap, error) {
	var m ClusterMap
	if err := strictyaml.Decode(b, &m); err != nil {
		return nil, fmt.Errorf("parse clusters file: %w", err)
	}
	if len(m.Clusters) == 0 {
		return nil, errors.New("clusters: name at least one cluster (clusters: {a: {kubeconfig: FILE, context: CTX}})")
	}
	for _, name := range m.Names() {
		if !clusterRE.MatchString(name) {
			return nil, fmt.Errorf("clusters: %q is not a cluster name (a DNS label: lowercase letters, digits and '-')", name)
		}
		c := m.Clusters[name]
		if strings.ContainsRune(c.Kubeconfig, 0) || strings.ContainsRune(c.Context, 0) {
			return nil, fmt.Errorf("clusters.%s: a NUL byte in kubeconfig or context", name)
		}
		for _, r := range c.Remote {
			p, err := parsePrefix(r)
			if err != nil {
				return nil, fmt.Errorf("clusters.%s.remote: %w", name, err)
			}
			c.remote = append(c.remote, p)
		}
		m.Clusters[name] = c
	}
	switch m.Direct {
	case "":
		m.Direct = DirectAuto
	case DirectAuto, DirectPod, DirectNodePort:
	default:
		return nil, fmt.Errorf("direct %q: must be auto, pod or nodeport", m.Direct)
	}
	switch m.Sessions {
	case "":
		m.Sessions = SessionsReset
	case SessionsReset, SessionsKeep:
	default:
		return nil, fmt.Errorf("sessions %q: must be reset or keep", m.Sessions)
	}
	if m.Installed != "" {
		if !strings.Contains(m.Installed, "{service}") {
			return nil, fmt.Errorf("installed %q: the template must contain {service} (e.g. {service}.{namespace}.svc.clusterset.local)", m.Installed)
		}
		rest := strings.NewReplacer("{service}", "x", "{namespace}", "x").Replace(m.Installed)
		if strings.ContainsAny(rest, "{}/: \t\n") {
			return nil, fmt.Errorf("installed %q: only {service} and {namespace} may be replaced, and the result must be a host name", m.Installed)
		}
	}
	if m.Image == "" {
		m.Image = Image
	}
	if strings.ContainsAny(m.Image, " \t\n\x00") {
		return nil, fmt.Errorf("image %q: not an image reference", m.Image)
	}
	m.dir = dir
	return &m, nil
}

// parsePrefix reads an address (a host prefix) or a CIDR prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP address nor a prefix (e.g. 10.200.128.2 or 10.96.0.0/12)", s)
	}
	return p.Masked(), nil
}

// LoadClusterMap reads and parses a clusters file.
func LoadClusterMap(path string) (*ClusterMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := ParseClusterMap(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Names lists the clusters in a stable order.
func (m *ClusterMap) Names() []string {
	names := make([]string, 0, len(m.Clusters))
	for n := range m.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Config reads cluster name's kubeconfig and context. A missing file,
// context or cluster entry is an error naming the cluster and the file.
func (m *ClusterMap) Config(name string) (*rest.Config, error) {
	c, ok := m.Clusters[name]
	if !ok {
		return nil, fmt.Errorf("cluster %s: not in the clusters file (it has %s)", name, strings.Join(m.Names(), ", "))
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	where := "the default kubeconfig"
	if c.Kubeconfig != "" {
		path := c.Kubeconfig
		if !filepath.IsAbs(path) {
			path = filepath.Join(m.dir, path)
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("cluster %s: kubeconfig: %w", name, err)
		}
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		where = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster %s: kubeconfig %s: %w", name, where, err)
	}
	return cfg, nil
}
