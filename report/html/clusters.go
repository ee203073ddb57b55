package html

import (
	"maps"
	"slices"
	"strings"
)

// Clusters is what a run on Kubernetes clusters records in metadata.json
// under "clusters" (docs/lab-clusters.md, "Metadata"): the clusters, how
// the direct tool reached the server and the link emulation per unit. The
// JSON names are lab/kube's Metadata; this package cannot import it (the
// lab imports the report), so the shape is repeated here and
// TestRunOnClusters renders a real run's file to keep the two together.
type Clusters struct {
	Server   string                  `json:"server"`
	Client   string                  `json:"client"`
	Clusters map[string]*ClusterInfo `json:"clusters"`
	Direct   map[string]string       `json:"direct"`
	// Emulation is per unit of an impaired scenario.
	Emulation map[string]ClusterEmulation `json:"emulation,omitempty"`
}

// ClusterInfo is one cluster's API server, CNI and nodes.
type ClusterInfo struct {
	Server  string            `json:"server"`
	Version string            `json:"version"`
	CNI     string            `json:"cni"`
	Nodes   []ClusterNodeInfo `json:"nodes"`
	// Source is the address the other cluster sees this cluster's pods'
	// traffic come from, where it was looked for.
	Source *ClusterSource `json:"source,omitempty"`
}

// ClusterSource is what lab/kube detected as a cluster's source address.
type ClusterSource struct {
	Addresses []string `json:"addresses,omitempty"`
	How       string   `json:"how,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// ClusterNodeInfo is a node's node.status.nodeInfo and network.
type ClusterNodeInfo struct {
	Name             string `json:"name"`
	OS               string `json:"os"`
	Arch             string `json:"arch"`
	Kernel           string `json:"kernel"`
	OSImage          string `json:"osImage"`
	ContainerRuntime string `json:"containerRuntime"`
	Kubelet          string `json:"kubelet"`
	PodCIDRs         string `json:"podCIDRs,omitempty"`
	Addresses        string `json:"addresses,omitempty"`
	Ready            bool   `json:"ready"`
}

// ClusterEmulation is a unit's link emulation: the composed path per
// direction, applied on each cluster's egress toward its Remote.
type ClusterEmulation struct {
	Scenario string              `json:"scenario"`
	Params   string              `json:"params"`
	Remote   map[string][]string `json:"remote"`
}

// clustersView is the page's clusters section, in display order.
type clustersView struct {
	Clusters  []clusterRow
	Nodes     []nodeRow
	Direct    []unitValue
	Emulation []emulationRow
}

type clusterRow struct {
	Name, Role string
	*ClusterInfo
}

type nodeRow struct {
	Cluster string
	ClusterNodeInfo
}

type unitValue struct{ Unit, Value string }

type emulationRow struct {
	Unit string
	ClusterEmulation
	Remote []unitValue // cluster → its remote, comma separated
}

// clustersView orders c for the page; nil without clusters (a run in the
// namespace lab), so that page shows no section.
func newClustersView(c *Clusters) *clustersView {
	if c == nil {
		return nil
	}
	v := &clustersView{}
	for _, name := range slices.Sorted(maps.Keys(c.Clusters)) {
		info := c.Clusters[name]
		if info == nil {
			continue
		}
		var roles []string
		if name == c.Server {
			roles = append(roles, "server")
		}
		if name == c.Client {
			roles = append(roles, "client")
		}
		v.Clusters = append(v.Clusters, clusterRow{name, strings.Join(roles, ", "), info})
		for _, n := range info.Nodes {
			v.Nodes = append(v.Nodes, nodeRow{name, n})
		}
	}
	for _, u := range slices.Sorted(maps.Keys(c.Direct)) {
		v.Direct = append(v.Direct, unitValue{u, c.Direct[u]})
	}
	for _, u := range slices.Sorted(maps.Keys(c.Emulation)) {
		e := c.Emulation[u]
		row := emulationRow{Unit: u, ClusterEmulation: e}
		for _, name := range slices.Sorted(maps.Keys(e.Remote)) {
			row.Remote = append(row.Remote, unitValue{name, strings.Join(e.Remote[name], ", ")})
		}
		v.Emulation = append(v.Emulation, row)
	}
	return v
}
