package broker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/strait-net/strait/catalog"
)

// Export is one service a cluster offers to the clusterset, as peers see
// it: name, namespace, ports and labels. The target address behind the
// exporting gateway is private to that cluster and never published.
type Export struct {
	Namespace string                `json:"namespace"`
	Name      string                `json:"name"`
	Ports     []catalog.ServicePort `json:"ports,omitempty"`
	Labels    map[string]string     `json:"labels,omitempty"`
}

// Key returns "namespace/name".
func (e Export) Key() string { return e.Namespace + "/" + e.Name }

// Validate checks the fields with the catalog's rules for a ServiceExport.
func (e Export) Validate() error {
	se := e.ServiceExport()
	// The target is private to the exporting cluster and never published;
	// a placeholder satisfies the catalog's required-field check so the
	// other rules (names, labels, ports) are the catalog's own.
	se.Spec.Target = "target.invalid:1"
	if err := se.Validate(); err != nil {
		return fmt.Errorf("export %s: %w", e.Key(), err)
	}
	for i, p := range e.Ports {
		if p.Target != "" {
			return fmt.Errorf("export %s: ports[%d].target: must be empty: targets are private to the exporting cluster", e.Key(), i)
		}
	}
	return nil
}

// ServiceExport returns e as a catalog resource (without a target).
func (e Export) ServiceExport() *catalog.ServiceExport {
	return &catalog.ServiceExport{
		Metadata: catalog.ObjectMeta{Name: e.Name, Namespace: e.Namespace, Labels: e.Labels},
		Spec:     catalog.ServiceExportSpec{Ports: e.Ports},
	}
}

// ExportOf returns what the broker publishes of a ServiceExport: all but
// its targets, spec.target and the ports' own.
func ExportOf(se *catalog.ServiceExport) Export {
	ns := se.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	ports := se.Spec.Ports
	if slices.ContainsFunc(ports, func(p catalog.ServicePort) bool { return p.Target != "" }) {
		ports = slices.Clone(ports) // the resource is the caller's
		for i := range ports {
			ports[i].Target = ""
		}
	}
	return Export{Namespace: ns, Name: se.Metadata.Name, Ports: ports, Labels: se.Metadata.Labels}
}

// Gateway is one of a cluster's gateways: the address peer gateways dial
// (its WAN listener) and whether the cluster's agent considers it healthy.
type Gateway struct {
	Addr    string `json:"addr"`
	Healthy bool   `json:"healthy"`
}

// ClusterState is everything one cluster publishes. Publishing a
// ClusterState replaces the cluster's previous one.
type ClusterState struct {
	Exports  []Export  `json:"exports,omitempty"`
	Gateways []Gateway `json:"gateways,omitempty"`
}

// Catalog is the clusterset as the broker holds it at one revision.
type Catalog struct {
	Revision uint64
	// Clusters maps cluster ID to what it published; a cluster that never
	// published is absent.
	Clusters map[string]*ClusterState
}

// ClusterIDs returns the clusters of the catalog in sorted order.
func (c *Catalog) ClusterIDs() []string {
	ids := make([]string, 0, len(c.Clusters))
	for id := range c.Clusters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Change is one delta of the catalog.
type Change struct {
	// Cluster is the cluster the change belongs to.
	Cluster string
	// Export is set when an export was created, changed or (Deleted)
	// removed; for a deletion only Namespace and Name are filled in.
	Export *Export
	// Gateways is set (possibly empty) when the cluster's gateway list
	// changed; Export is then nil.
	Gateways []Gateway
	// Deleted marks the removal of Export.
	Deleted bool
}

// Update is what a watching client receives, in revision order. After a
// connect that could not resume, Snapshot is true and Catalog is the whole
// catalog, replacing anything received before (Changes is empty);
// otherwise Changes are the deltas up to Revision and Catalog is nil
// (Client.Catalog builds a copy of the current view on demand). The
// callback owns what it receives.
type Update struct {
	Revision uint64
	Snapshot bool
	Changes  []Change
	Catalog  *Catalog
}
