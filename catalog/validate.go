package catalog

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/strait-net/strait/internal/dnsname"
)

// FieldError is one invalid field: Path is as in the YAML, e.g.
// "spec.ports[1].port".
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string { return e.Path + ": " + e.Msg }

// FieldErrors are all invalid fields of one resource.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// errs collects field errors; its methods check one rule each.
type errs struct{ list FieldErrors }

func (e *errs) add(path, format string, args ...any) {
	e.list = append(e.list, FieldError{path, fmt.Sprintf(format, args...)})
}

func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	return e.list
}

var (
	dns1035LabelRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	qualifiedRE    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

// isServiceName is the rule for Service names (RFC 1035 label), which MCS
// export and import names are.
func isServiceName(s string) bool { return len(s) <= 63 && dns1035LabelRE.MatchString(s) }

func (e *errs) dnsLabel(path, s string) {
	switch {
	case s == "":
		e.add(path, "required: a DNS label (lowercase letters, digits and '-', at most 63)")
	case !dnsname.IsLabel(s):
		e.add(path, "%q is not a DNS label (lowercase letters, digits and '-', starting and ending alphanumeric, at most 63)", s)
	}
}

func (e *errs) dnsSubdomain(path, s string) {
	switch {
	case s == "":
		e.add(path, "required: a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)")
	case !dnsname.IsSubdomain(s):
		e.add(path, "%q is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)", s)
	}
}

func (e *errs) serviceName(path, s string) {
	switch {
	case s == "":
		e.add(path, "required: a service name (DNS label starting with a letter)")
	case !isServiceName(s):
		e.add(path, "%q is not a service name (lowercase letters, digits and '-', starting with a letter, at most 63)", s)
	}
}

// labelKey checks a Kubernetes qualified name: [prefix/]name.
func (e *errs) labelKey(path, k string) {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	switch {
	case hasPrefix && !dnsname.IsSubdomain(prefix):
		e.add(path, "key %q: prefix %q is not a DNS subdomain", k, prefix)
	case len(name) == 0 || len(name) > 63 || !qualifiedRE.MatchString(name):
		e.add(path, "key %q is not a qualified name (alphanumerics, '-', '_', '.', at most 63, optional DNS-subdomain prefix and '/')", k)
	}
}

func (e *errs) labelValue(path, v string) {
	if v != "" && (len(v) > 63 || !qualifiedRE.MatchString(v)) {
		e.add(path, "%q is not a label value (empty, or alphanumerics, '-', '_', '.' starting and ending alphanumeric, at most 63)", v)
	}
}

func (e *errs) labels(path string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		e.labelKey(path, k)
		e.labelValue(path+"["+k+"]", m[k])
	}
}

// maxAnnotations is Kubernetes' limit on the total size of annotations.
const maxAnnotations = 256 << 10

func (e *errs) meta(m *ObjectMeta, k Kind) {
	switch k {
	case KindPeer:
		e.dnsLabel("metadata.name", m.Name) // a cluster ID
	case KindServiceExport, KindServiceImport:
		e.serviceName("metadata.name", m.Name)
	default:
		e.dnsSubdomain("metadata.name", m.Name)
	}
	if k.Namespaced() {
		e.dnsLabel("metadata.namespace", m.Namespace)
	} else if m.Namespace != "" {
		e.add("metadata.namespace", "must be empty: %s is cluster-scoped", k)
	}
	e.labels("metadata.labels", m.Labels)
	size := 0
	for _, k := range sortedKeys(m.Annotations) {
		e.labelKey("metadata.annotations", k)
		size += len(k) + len(m.Annotations[k])
	}
	if size > maxAnnotations {
		e.add("metadata.annotations", "total size %d exceeds %d bytes", size, maxAnnotations)
	}
}

// hostPort checks a host:port address: host an IP or DNS name, numeric
// port 1..65535.
func (e *errs) hostPort(path, s string) {
	if s == "" {
		e.add(path, "required: host:port")
		return
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		e.add(path, "%q is not host:port", s)
		return
	}
	if _, err := netip.ParseAddr(host); err != nil && !dnsname.IsSubdomain(strings.ToLower(host)) {
		e.add(path, "%q: host %q is neither an IP address nor a DNS name", s, host)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		e.add(path, "%q: port %q is not a number in 1..65535", s, port)
	}
}

// ports checks a port list; export says whether ports may have targets.
func (e *errs) ports(path string, ps []ServicePort, required, export bool) {
	if required && len(ps) == 0 {
		e.add(path, "required: at least one port")
	}
	names := map[string]bool{}
	// A port number and protocol is one port of a Service: two entries for
	// it would make the port's target (and the import's port) ambiguous.
	numbers := map[ServicePort]int{}
	for i, p := range ps {
		pp := fmt.Sprintf("%s[%d]", path, i)
		if p.Name == "" && len(ps) > 1 {
			e.add(pp+".name", "required when there is more than one port")
		} else if p.Name != "" {
			if !dnsname.IsLabel(p.Name) {
				e.add(pp+".name", "%q is not a DNS label", p.Name)
			}
			if names[p.Name] {
				e.add(pp+".name", "duplicate port name %q", p.Name)
			}
			names[p.Name] = true
		}
		switch p.Protocol {
		case TCP, UDP, SCTP, "":
		default:
			e.add(pp+".protocol", "%q is not one of TCP, UDP, SCTP", p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			e.add(pp+".port", "%d is not in 1..65535", p.Port)
		}
		k := ServicePort{Port: p.Port, Protocol: p.Protocol}
		if k.Protocol == "" {
			k.Protocol = TCP
		}
		if j, dup := numbers[k]; dup {
			e.add(pp+".port", "duplicate port %d/%s (also %s[%d])", k.Port, k.Protocol, path, j)
		} else {
			numbers[k] = i
		}
		switch {
		case p.Target == "":
		case !export:
			e.add(pp+".target", "only an export's ports have a target (where the exporting cluster sends the port's connections)")
		default:
			e.hostPort(pp+".target", p.Target)
		}
	}
}

func (e *errs) dnsLabels(path string, list []string) {
	seen := map[string]bool{}
	for i, s := range list {
		p := fmt.Sprintf("%s[%d]", path, i)
		e.dnsLabel(p, s)
		if seen[s] {
			e.add(p, "duplicate %q", s)
		}
		seen[s] = true
	}
}

func (e *errs) selector(path string, s *LabelSelector) {
	if s == nil {
		return
	}
	e.labels(path+".matchLabels", s.MatchLabels)
	for i, r := range s.MatchExpressions {
		p := fmt.Sprintf("%s.matchExpressions[%d]", path, i)
		e.labelKey(p+".key", r.Key)
		switch r.Operator {
		case OpIn, OpNotIn:
			if len(r.Values) == 0 {
				e.add(p+".values", "required: at least one value for operator %s", r.Operator)
			}
			for j, v := range r.Values {
				e.labelValue(fmt.Sprintf("%s.values[%d]", p, j), v)
			}
		case OpExists, OpDoesNotExist:
			if len(r.Values) != 0 {
				e.add(p+".values", "must be empty for operator %s", r.Operator)
			}
		default:
			e.add(p+".operator", "%q is not one of In, NotIn, Exists, DoesNotExist", r.Operator)
		}
	}
}

// Validate checks the peer's name and gateway addresses.
func (p *Peer) Validate() error {
	var e errs
	e.meta(&p.Metadata, KindPeer)
	if len(p.Spec.Gateways) == 0 {
		e.add("spec.gateways", "required: at least one host:port")
	}
	seen := map[string]bool{}
	for i, g := range p.Spec.Gateways {
		path := fmt.Sprintf("spec.gateways[%d]", i)
		e.hostPort(path, g)
		if seen[g] {
			e.add(path, "duplicate %q", g)
		}
		seen[g] = true
	}
	switch p.Spec.DataPlane {
	case "", DataPlaneStream, DataPlanePacket:
	default:
		e.add("spec.dataPlane", "%q is not one of %s, %s (or empty: the gateway's configuration decides)", p.Spec.DataPlane, DataPlaneStream, DataPlanePacket)
	}
	return e.err()
}

// Validate checks the export's names, target and ports.
func (s *ServiceExport) Validate() error {
	var e errs
	e.meta(&s.Metadata, KindServiceExport)
	ownTargets := len(s.Spec.Ports) > 0
	for _, p := range s.Spec.Ports {
		ownTargets = ownTargets && p.Target != ""
	}
	if s.Spec.Target == "" && !ownTargets {
		e.add("spec.target", "required: host:port, unless every port in spec.ports has a target of its own")
	} else if s.Spec.Target != "" {
		e.hostPort("spec.target", s.Spec.Target)
	}
	e.ports("spec.ports", s.Spec.Ports, false, true)
	return e.err()
}

// Validate checks the import's names, type, addresses, ports and clusters.
func (s *ServiceImport) Validate() error {
	var e errs
	e.meta(&s.Metadata, KindServiceImport)
	switch s.Spec.Type {
	case ClusterSetIP, "":
		e.ports("spec.ports", s.Spec.Ports, true, false)
	case Headless:
		if len(s.Spec.IPs) != 0 {
			e.add("spec.ips", "must be empty for type Headless")
		}
		e.ports("spec.ports", s.Spec.Ports, false, false)
	default:
		e.add("spec.type", "%q is not one of ClusterSetIP, Headless", s.Spec.Type)
	}
	var v4, v6 int
	for i, ip := range s.Spec.IPs {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			e.add(fmt.Sprintf("spec.ips[%d]", i), "%q is not an IP address", ip)
			continue
		}
		if a.Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		e.add("spec.ips", "at most one IPv4 and one IPv6 address")
	}
	e.clusters("spec.clusters", s.Spec.Clusters)
	if s.Status != nil {
		e.clusters("status.clusters", s.Status.Clusters)
		if len(s.Spec.Clusters) > 0 && len(s.Status.Clusters) > 0 {
			e.add("spec.clusters", "set spec.clusters or status.clusters, not both")
		}
	}
	return e.err()
}

func (e *errs) clusters(path string, cs []ClusterStatus) {
	seen := map[string]bool{}
	for i, c := range cs {
		p := fmt.Sprintf("%s[%d].cluster", path, i)
		e.dnsLabel(p, c.Cluster)
		if seen[c.Cluster] {
			e.add(p, "duplicate %q", c.Cluster)
		}
		seen[c.Cluster] = true
	}
}

// Validate checks the policy's priority, action and selectors.
func (a *AccessPolicy) Validate() error {
	var e errs
	e.meta(&a.Metadata, KindAccessPolicy)
	s := &a.Spec
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		e.add("spec.priority", "%d is not in %d..%d (lower takes precedence)", s.Priority, MinPriority, MaxPriority)
	}
	switch s.Action {
	case Allow, Deny:
	case "":
		e.add("spec.action", "required: allow or deny")
	default:
		e.add("spec.action", "%q is not one of allow, deny", s.Action)
	}
	e.dnsLabels("spec.from.clusters", s.From.Clusters)
	e.dnsLabels("spec.from.namespaces", s.From.Namespaces)
	e.selector("spec.from.workloadSelector", s.From.WorkloadSelector)
	seen := map[string]bool{}
	for i, x := range s.To.Exports {
		p := fmt.Sprintf("spec.to.exports[%d]", i)
		e.serviceName(p, x)
		if seen[x] {
			e.add(p, "duplicate %q", x)
		}
		seen[x] = true
	}
	e.dnsLabels("spec.to.namespaces", s.To.Namespaces)
	e.selector("spec.to.exportSelector", s.To.ExportSelector)
	return e.err()
}

// Validate checks the workload's names, labels and addresses. Addresses
// must be canonical so that one address has one spelling (the gateway
// looks them up exactly), and plain IPv4 rather than IPv4-mapped IPv6
// (the gateway unmaps a client's address before the lookup).
func (w *Workload) Validate() error {
	var e errs
	e.meta(&w.Metadata, KindWorkload)
	if len(w.Spec.Addresses) == 0 {
		e.add("spec.addresses", "required: at least one IP address")
	}
	seen := map[string]bool{}
	for i, s := range w.Spec.Addresses {
		p := fmt.Sprintf("spec.addresses[%d]", i)
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "":
			e.add(p, "%q is not an IP address", s)
		case a.Is4In6():
			e.add(p, "%q is an IPv4-mapped IPv6 address: write %s", s, a.Unmap())
		case a.String() != s:
			e.add(p, "%q is not in canonical form: write %s", s, a)
		case seen[s]:
			e.add(p, "duplicate %q", s)
		}
		seen[s] = true
	}
	return e.err()
}
