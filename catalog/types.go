// Package catalog defines strait's declarative resources — Peer,
// ServiceExport, ServiceImport, AccessPolicy and Workload — and keeps
// them: a strict YAML/JSON parser with validation, an in-memory revisioned
// Set and a file-backed Store.
//
// The types are the schema the Kubernetes CRDs will use later, so they have
// the Kubernetes envelope (apiVersion, kind, metadata, spec, status) and the
// MCS API (sigs.k8s.io/mcs-api, KEP-1645) names and shapes for exports and
// imports. Where standalone mode needs something Kubernetes gets elsewhere
// (the target of an export, the source clusters of an import) the extension
// is a spec field, documented on the field.
//
// Scope: ServiceExport, ServiceImport and Workload are namespaced (namespace defaults
// to "default", as kubectl does); Peer and AccessPolicy are cluster-scoped,
// like AdminNetworkPolicy, and must not have a namespace.
package catalog

import (
	"fmt"
	"slices"
)

// API group versions of the resources.
const (
	// StraitAPIVersion is the group version of strait's own kinds.
	StraitAPIVersion = "strait.dev/v1alpha1"
	// MCSAPIVersion is the group version of the MCS API kinds.
	MCSAPIVersion = "multicluster.x-k8s.io/v1alpha1"
)

// Kind names a resource type as in the YAML "kind" field.
type Kind string

// The kinds this package knows.
const (
	KindPeer          Kind = "Peer"
	KindServiceExport Kind = "ServiceExport"
	KindServiceImport Kind = "ServiceImport"
	KindAccessPolicy  Kind = "AccessPolicy"
	KindWorkload      Kind = "Workload"
)

// Kinds lists every kind, in the order List and Encode use.
var Kinds = []Kind{KindPeer, KindServiceExport, KindServiceImport, KindAccessPolicy, KindWorkload}

// apiVersionOf is the one accepted apiVersion per kind.
var apiVersionOf = map[Kind]string{
	KindPeer:          StraitAPIVersion,
	KindServiceExport: MCSAPIVersion,
	KindServiceImport: MCSAPIVersion,
	KindAccessPolicy:  StraitAPIVersion,
	KindWorkload:      StraitAPIVersion,
}

// Namespaced reports whether resources of kind k live in a namespace.
func (k Kind) Namespaced() bool {
	return k == KindServiceExport || k == KindServiceImport || k == KindWorkload
}

// APIVersion returns the apiVersion resources of kind k carry.
func (k Kind) APIVersion() string { return apiVersionOf[k] }

// TypeMeta is the apiVersion/kind pair every document starts with. Parse
// and Set fill it in, so Go code constructing resources may leave it empty;
// the Kind method of each resource, not this field, is authoritative.
type TypeMeta struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"`
}

// ObjectMeta is the subset of Kubernetes object metadata strait uses.
type ObjectMeta struct {
	Name        string            `json:"name" yaml:"name"`
	Namespace   string            `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty" yaml:"annotations,omitempty"`
}

// Key identifies a resource within a Set.
type Key struct {
	Kind      Kind
	Namespace string // "" for cluster-scoped kinds
	Name      string
}

// String formats k as `ServiceExport default/echo` or `Peer west`.
func (k Key) String() string {
	if k.Namespace == "" {
		return fmt.Sprintf("%s %s", k.Kind, k.Name)
	}
	return fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name)
}

// less orders keys by kind (in Kinds order), namespace, name.
func (k Key) less(o Key) bool {
	if k.Kind != o.Kind {
		return kindIndex(k.Kind) < kindIndex(o.Kind)
	}
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	return k.Name < o.Name
}

func kindIndex(k Kind) int {
	for i, x := range Kinds {
		if x == k {
			return i
		}
	}
	return len(Kinds)
}

// Resource is one of *Peer, *ServiceExport, *ServiceImport, *AccessPolicy,
// *Workload. The set is closed (the unexported method) so a type switch
// over the five is exhaustive.
type Resource interface {
	Kind() Kind
	Key() Key
	// Meta returns the resource's metadata for reading and editing.
	Meta() *ObjectMeta
	// Validate checks the resource's fields; errors name the field path.
	Validate() error
	// typeMeta lets Parse and Set fill in apiVersion and kind.
	typeMeta() *TypeMeta
}

// Protocol is a transport protocol of a service port, as in Kubernetes.
type Protocol string

// The protocols Kubernetes services have. The strait data plane carries TCP
// and UDP; SCTP is accepted so MCS resources from Kubernetes parse.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// ServicePort is an MCS API port: the same shape in exports and imports.
type ServicePort struct {
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Protocol defaults to TCP.
	Protocol    Protocol `json:"protocol,omitempty" yaml:"protocol,omitempty"`
	AppProtocol string   `json:"appProtocol,omitempty" yaml:"appProtocol,omitempty"`
	Port        int32    `json:"port" yaml:"port"`
	// Target is strait's extension for an export's ports: the host:port
	// this port's connections go to, for a service whose ports are served
	// at different addresses (spec.target, a single address, cannot say
	// that). Empty means the export's spec.target. Like spec.target it is
	// private to the exporting cluster: imports have none, and the broker
	// never publishes it.
	Target string `json:"target,omitempty" yaml:"target,omitempty"`
}

// Peer is another cluster of the clusterset: metadata.name is its cluster
// ID (a DNS label), and the spec says where its gateways listen.
type Peer struct {
	TypeMeta `json:",inline" yaml:",inline"`
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
	Spec     PeerSpec   `json:"spec" yaml:"spec"`
}

// PeerSpec lists a peer cluster's gateways and the data plane toward it.
type PeerSpec struct {
	// Gateways are host:port addresses, at least one; all are active.
	Gateways []string `json:"gateways" yaml:"gateways"`
	// DataPlane carries this cluster's traffic with the peer: stream (TLS
	// streams) or packet (the kernel packet mode, docs/packet.md). Empty
	// leaves it to the gateway's configuration (peers.<cluster>.data-plane),
	// whose default is stream. Set, it overrides that configuration.
	DataPlane DataPlane `json:"dataPlane,omitempty" yaml:"dataPlane,omitempty"`
}

// DataPlane is how a peer's traffic is carried (docs/packet.md).
type DataPlane string

// Data planes.
const (
	DataPlaneStream DataPlane = "stream"
	DataPlanePacket DataPlane = "packet"
)

// ServiceExport publishes a local service to the clusterset (MCS API). In
// Kubernetes the service it names is enough; standalone strait has no
// Service object, so the spec says where the service listens.
type ServiceExport struct {
	TypeMeta `json:",inline" yaml:",inline"`
	Metadata ObjectMeta        `json:"metadata" yaml:"metadata"`
	Spec     ServiceExportSpec `json:"spec,omitempty" yaml:"spec,omitempty"`
}

// ServiceExportSpec is strait's standalone extension of ServiceExport (the
// MCS API ServiceExport has no spec).
type ServiceExportSpec struct {
	// Target is the host:port of the local service the gateway forwards
	// to: for every port when Ports is empty, else for the ports without a
	// target of their own. Required unless every port has its own target;
	// the Kubernetes controller derives per-port targets from the Service.
	Target string `json:"target,omitempty" yaml:"target,omitempty"`
	// Ports optionally describe the service's ports, copied into imports
	// (without their targets). A client reaches an import's port; the
	// stream carries that port number and protocol, and the exporting
	// gateway serves only the TCP and UDP ports listed here (any port when
	// none is listed).
	Ports []ServicePort `json:"ports,omitempty" yaml:"ports,omitempty"`
}

// TargetFor returns where the export sends a connection a client made to
// its TCP port port: that port's own target, else spec.target. An export
// without ports sends every port to spec.target. Port 0 means the sending
// gateway did not say (a version that predates multi-port exports): that
// works only when the export has a single target, since guessing would send
// a client of one port to another port's server.
func (s *ServiceExport) TargetFor(port int32) (string, error) {
	if port == 0 {
		switch ts := s.Targets(); len(ts) {
		case 0:
			return "", fmt.Errorf("export %s/%s has no TCP port", s.Metadata.Namespace, s.Metadata.Name)
		case 1:
			return ts[0], nil
		}
		return "", fmt.Errorf("export %s/%s has a target per port, and the peer did not say which port (a gateway too old for multi-port exports)",
			s.Metadata.Namespace, s.Metadata.Name)
	}
	return s.TargetForProtocol(TCP, port)
}

// TargetForProtocol returns where the export sends traffic of protocol
// proto (TCP or UDP) to its port port, by the rules of TargetFor: the
// listed port of that number and protocol, never one of the other
// protocol (a service may serve TCP and UDP on one number at different
// addresses). An export without ports sends every port of either protocol
// to spec.target.
func (s *ServiceExport) TargetForProtocol(proto Protocol, port int32) (string, error) {
	if proto == "" {
		proto = TCP
	}
	if len(s.Spec.Ports) == 0 {
		return s.Spec.Target, nil
	}
	for _, p := range s.Spec.Ports {
		if p.Port == port && (p.Protocol == proto || (p.Protocol == "" && proto == TCP)) {
			if p.Target != "" {
				return p.Target, nil
			}
			return s.Spec.Target, nil
		}
	}
	return "", fmt.Errorf("export %s/%s has no %s port %d", s.Metadata.Namespace, s.Metadata.Name, proto, port)
}

// Targets returns the distinct addresses TargetFor can return, in port
// order: what the gateway keeps warm connections to.
func (s *ServiceExport) Targets() []string {
	var out []string
	add := func(t string) {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(s.Spec.Ports) == 0 {
		add(s.Spec.Target)
	}
	for _, p := range s.Spec.Ports {
		if p.Protocol != TCP && p.Protocol != "" {
			continue // warm connections are TCP connections
		}
		if p.Target != "" {
			add(p.Target)
		} else {
			add(s.Spec.Target)
		}
	}
	return out
}

// ServiceImportType is the MCS API import type.
type ServiceImportType string

// The MCS API import types; the empty type means ClusterSetIP.
const (
	ClusterSetIP ServiceImportType = "ClusterSetIP"
	Headless     ServiceImportType = "Headless"
)

// ServiceImport makes remote exports of the same name and namespace
// reachable at a local address (MCS API).
type ServiceImport struct {
	TypeMeta `json:",inline" yaml:",inline"`
	Metadata ObjectMeta           `json:"metadata" yaml:"metadata"`
	Spec     ServiceImportSpec    `json:"spec" yaml:"spec"`
	Status   *ServiceImportStatus `json:"status,omitempty" yaml:"status,omitempty"`
}

// ServiceImportSpec follows mcs-api's ServiceImportSpec.
type ServiceImportSpec struct {
	// Type defaults to ClusterSetIP.
	Type ServiceImportType `json:"type,omitempty" yaml:"type,omitempty"`
	// IPs are the clusterset IPs: the local addresses the gateway listens
	// on, one per IP family at most. Empty means the agent assigns one.
	// Headless imports have none.
	IPs   []string      `json:"ips,omitempty" yaml:"ips,omitempty"`
	Ports []ServicePort `json:"ports,omitempty" yaml:"ports,omitempty"`
	// Clusters restricts the import to exports from these clusters; empty
	// means every cluster exporting the same name and namespace, as in MCS.
	//
	// This is strait's standalone extension. In mcs-api the source clusters
	// are status.clusters, written by the MCS controller; a standalone user
	// is that controller, but writing "status" by hand is odd and most
	// tools drop status on apply, so strait takes them here. status.clusters
	// is accepted too, so `kubectl get serviceimport -o yaml` output applies
	// unchanged; setting both is an error (which one would win is a guess).
	// Use SourceClusters to read whichever is set.
	Clusters []ClusterStatus `json:"clusters,omitempty" yaml:"clusters,omitempty"`
}

// ServiceImportStatus follows mcs-api's ServiceImportStatus.
type ServiceImportStatus struct {
	Clusters []ClusterStatus `json:"clusters,omitempty" yaml:"clusters,omitempty"`
}

// ClusterStatus names a cluster an import's backends come from.
type ClusterStatus struct {
	Cluster string `json:"cluster" yaml:"cluster"`
}

// SourceClusters returns the cluster IDs the import takes backends from,
// from spec.clusters or status.clusters; nil means any exporting cluster.
func (s *ServiceImport) SourceClusters() []string {
	cs := s.Spec.Clusters
	if len(cs) == 0 && s.Status != nil {
		cs = s.Status.Clusters
	}
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Cluster
	}
	return out
}

// Action is what an AccessPolicy does with the connections it matches.
type Action string

// The policy actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
)

// MinPriority and MaxPriority bound AccessPolicy priorities; as in
// AdminNetworkPolicy, a lower number takes precedence.
const (
	MinPriority = 0
	MaxPriority = 1000
)

// AccessPolicy allows or denies connections from sources to exports. See
// package policy for the evaluation order.
type AccessPolicy struct {
	TypeMeta `json:",inline" yaml:",inline"`
	Metadata ObjectMeta       `json:"metadata" yaml:"metadata"`
	Spec     AccessPolicySpec `json:"spec" yaml:"spec"`
}

// AccessPolicySpec is the rule. Every empty list or nil selector matches
// anything; the lists of one side are ANDed.
type AccessPolicySpec struct {
	// Priority orders policies, MinPriority..MaxPriority, lower first.
	Priority int32  `json:"priority" yaml:"priority"`
	Action   Action `json:"action" yaml:"action"`
	From     Source `json:"from,omitempty" yaml:"from,omitempty"`
	To       Target `json:"to,omitempty" yaml:"to,omitempty"`
}

// Source selects the client side of a connection.
type Source struct {
	Clusters         []string       `json:"clusters,omitempty" yaml:"clusters,omitempty"`
	Namespaces       []string       `json:"namespaces,omitempty" yaml:"namespaces,omitempty"`
	WorkloadSelector *LabelSelector `json:"workloadSelector,omitempty" yaml:"workloadSelector,omitempty"`
}

// Target selects the export a connection goes to.
type Target struct {
	Exports        []string       `json:"exports,omitempty" yaml:"exports,omitempty"`
	Namespaces     []string       `json:"namespaces,omitempty" yaml:"namespaces,omitempty"`
	ExportSelector *LabelSelector `json:"exportSelector,omitempty" yaml:"exportSelector,omitempty"`
}

// LabelSelector is Kubernetes' metav1.LabelSelector: all of matchLabels
// and all expressions must hold; an empty selector matches everything.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty" yaml:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty" yaml:"matchExpressions,omitempty"`
}

// SelectorOperator is a label selector expression operator.
type SelectorOperator string

// The operators of metav1.LabelSelector.
const (
	OpIn           SelectorOperator = "In"
	OpNotIn        SelectorOperator = "NotIn"
	OpExists       SelectorOperator = "Exists"
	OpDoesNotExist SelectorOperator = "DoesNotExist"
)

// LabelSelectorRequirement is one expression of a LabelSelector.
type LabelSelectorRequirement struct {
	Key      string           `json:"key" yaml:"key"`
	Operator SelectorOperator `json:"operator" yaml:"operator"`
	Values   []string         `json:"values,omitempty" yaml:"values,omitempty"`
}

// Workload is a client identity learned at run time: the addresses of one
// workload (a Kubernetes Pod: its pod IPs) and, in its metadata, the
// namespace and labels that AccessPolicy's spec.from.namespaces and
// workloadSelector match. The Kubernetes controller pushes one per running
// Pod; a gateway checks them before the sources of its configuration (an
// exact address is more specific than a configured CIDR). See README
// "Access policies".
type Workload struct {
	TypeMeta `json:",inline" yaml:",inline"`
	Metadata ObjectMeta   `json:"metadata" yaml:"metadata"`
	Spec     WorkloadSpec `json:"spec" yaml:"spec"`
}

// WorkloadSpec lists a workload's addresses.
type WorkloadSpec struct {
	// Addresses are IP addresses in canonical form (as netip prints
	// them), at least one, IPv4 and IPv6 alike; connections from them are
	// this workload's.
	Addresses []string `json:"addresses" yaml:"addresses"`
}

func (p *Peer) Kind() Kind          { return KindPeer }
func (p *Peer) Key() Key            { return Key{KindPeer, "", p.Metadata.Name} }
func (p *Peer) Meta() *ObjectMeta   { return &p.Metadata }
func (p *Peer) typeMeta() *TypeMeta { return &p.TypeMeta }
func (s *ServiceExport) Kind() Kind { return KindServiceExport }
func (s *ServiceExport) Key() Key {
	return Key{KindServiceExport, s.Metadata.Namespace, s.Metadata.Name}
}
func (s *ServiceExport) Meta() *ObjectMeta {
	return &s.Metadata
}
func (s *ServiceExport) typeMeta() *TypeMeta { return &s.TypeMeta }
func (s *ServiceImport) Kind() Kind          { return KindServiceImport }
func (s *ServiceImport) Key() Key {
	return Key{KindServiceImport, s.Metadata.Namespace, s.Metadata.Name}
}
func (s *ServiceImport) Meta() *ObjectMeta {
	return &s.Metadata
}
func (s *ServiceImport) typeMeta() *TypeMeta { return &s.TypeMeta }
func (a *AccessPolicy) Kind() Kind           { return KindAccessPolicy }
func (a *AccessPolicy) Key() Key             { return Key{KindAccessPolicy, "", a.Metadata.Name} }
func (a *AccessPolicy) Meta() *ObjectMeta    { return &a.Metadata }
func (a *AccessPolicy) typeMeta() *TypeMeta  { return &a.TypeMeta }
func (w *Workload) Kind() Kind               { return KindWorkload }
func (w *Workload) Key() Key                 { return Key{KindWorkload, w.Metadata.Namespace, w.Metadata.Name} }
func (w *Workload) Meta() *ObjectMeta        { return &w.Metadata }
func (w *Workload) typeMeta() *TypeMeta      { return &w.TypeMeta }

// newOf returns an empty resource of kind k, or nil for an unknown kind.
func newOf(k Kind) Resource {
	switch k {
	case KindPeer:
		return &Peer{}
	case KindServiceExport:
		return &ServiceExport{}
	case KindServiceImport:
		return &ServiceImport{}
	case KindAccessPolicy:
		return &AccessPolicy{}
	case KindWorkload:
		return &Workload{}
	}
	return nil
}

// normalize fills in defaults and turns empty collections into nil, so a
// resource has one in-memory form however it was written (which makes
// Set.Apply's change detection and round trips exact).
func normalize(r Resource) {
	tm := r.typeMeta()
	tm.Kind = string(r.Kind())
	tm.APIVersion = r.Kind().APIVersion()
	m := r.Meta()
	if r.Kind().Namespaced() && m.Namespace == "" {
		m.Namespace = "default"
	}
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	switch r := r.(type) {
	case *Peer:
		r.Spec.Gateways = nilIfEmpty(r.Spec.Gateways)
	case *ServiceExport:
		r.Spec.Ports = normPorts(r.Spec.Ports)
	case *ServiceImport:
		if r.Spec.Type == "" {
			r.Spec.Type = ClusterSetIP
		}
		r.Spec.IPs = nilIfEmpty(r.Spec.IPs)
		r.Spec.Ports = normPorts(r.Spec.Ports)
		r.Spec.Clusters = nilIfEmpty(r.Spec.Clusters)
		if r.Status != nil {
			r.Status.Clusters = nilIfEmpty(r.Status.Clusters)
			if r.Status.Clusters == nil {
				r.Status = nil
			}
		}
	case *AccessPolicy:
		s := &r.Spec
		s.From.Clusters = nilIfEmpty(s.From.Clusters)
		s.From.Namespaces = nilIfEmpty(s.From.Namespaces)
		s.To.Exports = nilIfEmpty(s.To.Exports)
		s.To.Namespaces = nilIfEmpty(s.To.Namespaces)
		s.From.WorkloadSelector = normSelector(s.From.WorkloadSelector)
		s.To.ExportSelector = normSelector(s.To.ExportSelector)
	case *Workload:
		r.Spec.Addresses = nilIfEmpty(r.Spec.Addresses)
	}
}

func normPorts(ps []ServicePort) []ServicePort {
	for i := range ps {
		if ps[i].Protocol == "" {
			ps[i].Protocol = TCP
		}
	}
	return nilIfEmpty(ps)
}

// normSelector returns nil for an empty selector: both match everything.
func normSelector(s *LabelSelector) *LabelSelector {
	if s == nil || len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return nil
	}
	if len(s.MatchLabels) == 0 {
		s.MatchLabels = nil
	}
	s.MatchExpressions = nilIfEmpty(s.MatchExpressions)
	for i := range s.MatchExpressions {
		s.MatchExpressions[i].Values = nilIfEmpty(s.MatchExpressions[i].Values)
	}
	return s
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
