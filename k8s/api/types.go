// Package api holds the Go types of strait's own Kubernetes kinds,
// strait.dev/v1alpha1 Peer and AccessPolicy, and the scheme the controller
// uses (these plus the MCS API's ServiceExport and ServiceImport from
// sigs.k8s.io/mcs-api and the core types).
//
// The specs are package catalog's types, not copies: standalone mode and
// Kubernetes mode share one schema, and the CRD manifests are generated from
// these types (package k8s/crd), so they cannot drift apart.
package api

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
)

// GroupVersion is strait.dev/v1alpha1, catalog.StraitAPIVersion.
var GroupVersion = schema.GroupVersion{Group: "strait.dev", Version: "v1alpha1"}

// Peer is another cluster of the clusterset (cluster-scoped; the name is
// the cluster ID). The controller writes one per cluster the broker knows,
// labelled ManagedBy; users may add their own.
type Peer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              catalog.PeerSpec `json:"spec"`
}

// PeerList is a list of Peers.
type PeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Peer `json:"items"`
}

// AccessPolicy allows or denies connections to exports (cluster-scoped).
type AccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              catalog.AccessPolicySpec `json:"spec"`
}

// AccessPolicyList is a list of AccessPolicies.
type AccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessPolicy `json:"items"`
}

// Labels the controller puts on what it creates, so it finds (and deletes)
// only its own objects.
const (
	// ManagedByLabel is endpointslice.kubernetes.io/managed-by; the
	// controller sets it on everything it creates, with ManagedBy.
	ManagedByLabel = "endpointslice.kubernetes.io/managed-by"
	ManagedBy      = "controller.strait.dev"
)

// AddToScheme registers strait's kinds, the MCS API kinds and client-go's
// built-in kinds.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Peer{}, &PeerList{}, &AccessPolicy{}, &AccessPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	if err := mcsv1alpha1.Install(s); err != nil {
		return err
	}
	return clientgoscheme.AddToScheme(s)
}

// NewScheme returns a scheme with AddToScheme's kinds.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // only on a programming error: duplicate registrations
	}
	return s
}

// copyJSON deep-copies a catalog spec. The specs are small plain data with
// JSON tags, so a JSON round trip is a complete deep copy that cannot miss a
// field added to package catalog later, as a hand-written copy could.
func copyJSON[T any](in T) T {
	var out T
	b, err := json.Marshal(in)
	if err != nil {
		panic(err) // plain data always marshals
	}
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (p *Peer) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopy returns a deep copy of p.
func (p *Peer) DeepCopy() *Peer {
	if p == nil {
		return nil
	}
	out := &Peer{TypeMeta: p.TypeMeta, Spec: copyJSON(p.Spec)}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *PeerList) DeepCopyObject() runtime.Object {
	out := &PeerList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopy())
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (a *AccessPolicy) DeepCopyObject() runtime.Object { return a.DeepCopy() }

// DeepCopy returns a deep copy of a.
func (a *AccessPolicy) DeepCopy() *AccessPolicy {
	if a == nil {
		return nil
	}
	out := &AccessPolicy{TypeMeta: a.TypeMeta, Spec: copyJSON(a.Spec)}
	a.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *AccessPolicyList) DeepCopyObject() runtime.Object {
	out := &AccessPolicyList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopy())
	}
	return out
}
