package report

// ClusterRun is what a run on Kubernetes clusters records in metadata.json
// under "clusters" (docs/lab-clusters.md, "Metadata"): the clusters, how
// the direct tool reached the server and the link emulation per unit.
// lab/kube writes it and the report page reads it.
type ClusterRun struct {
	Server   string                  `json:"server"`
	Client   string                  `json:"client"`
	Clusters map[string]*ClusterInfo `json:"clusters"`
	// Direct is, per unit, how the direct tool reached the server: "pod"
	// (pod IPs routed between the clusters) or "nodeport" (a NodePort
	// Service on the server pod's node).
	Direct map[string]string `json:"direct"`
	// Emulation is, per unit of an impaired scenario, what was applied.
	Emulation map[string]ClusterEmulation `json:"emulation,omitempty"`
}

// ClusterEmulation is a unit's link emulation: Params (emulation.Params'
// String) on each cluster's egress toward Remote, per cluster.
type ClusterEmulation struct {
	Scenario string              `json:"scenario"`
	Params   string              `json:"params"` // per direction: the path composed (lab/scenario's Scenario.Path)
	Remote   map[string][]string `json:"remote"`
}

// ClusterInfo is one cluster's versions, nodes and network.
type ClusterInfo struct {
	Server  string        `json:"server"`  // API server URL
	Version string        `json:"version"` // the API server's git version
	CNI     string        `json:"cni"`     // best effort; says how it was found
	Nodes   []ClusterNode `json:"nodes"`
	// Source is the address the other cluster saw this cluster's pods'
	// traffic come from; nil where no impaired unit looked.
	Source *ClusterSource `json:"source,omitempty"`
}

// ClusterSource is the address a cluster's pod traffic has when it reaches
// the other cluster, as a pod there saw it: link emulation must impair the
// other cluster's replies toward it, and where the nodes masquerade pod
// traffic to an address the API does not report (a node's address on
// another interface, a cloud NAT gateway) nothing else finds it
// (docs/lab-clusters.md, "Where").
type ClusterSource struct {
	Addresses []string `json:"addresses,omitempty"`
	// How says where and by which paths it was seen ("seen by cluster
	// a's pod server-…: NodePort 10.0.0.1:30123 saw 10.200.0.2").
	How string `json:"how,omitempty"`
	// Error is why nothing was seen; the run goes on with what the API
	// and the clusters file's remote: give.
	Error string `json:"error,omitempty"`
}

// ClusterNode is what a node reports about itself (node.status.nodeInfo).
type ClusterNode struct {
	Name             string `json:"name"`
	OS               string `json:"os"`
	Arch             string `json:"arch"`
	Kernel           string `json:"kernel"`
	OSImage          string `json:"osImage"`
	ContainerRuntime string `json:"containerRuntime"`
	Kubelet          string `json:"kubelet"`
	PodCIDRs         string `json:"podCIDRs,omitempty"`
	Addresses        string `json:"addresses,omitempty"` // InternalIP and ExternalIP
	Ready            bool   `json:"ready"`
}
