package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// access is one thing a unit does in a cluster.
type access struct {
	verb, group, resource, subresource string
	namespaced                         bool
	// namespace: a namespaced access in this namespace (the emulator's),
	// not in the unit's.
	namespace string
}

// where says where a denied access was asked about.
func (a access) where() string {
	switch {
	case a.namespace != "":
		return "in namespace " + a.namespace + ", for link emulation"
	case a.namespaced:
		return "in namespaces " + unitNamespacePrefix + "*"
	}
	return "cluster-wide"
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	return a.verb + " " + r
}

// accesses lists what a unit does in a cluster that serves the workloads,
// runs the load generator, or both, with tools; export: a tool creates
// ServiceExports; emu (nil: no scenario is impaired): a unit asks each
// cluster's pods which source address the other's have (detectSources:
// an exec and a NodePort Service on each side), and the emulator does
// what emu says in every cluster.
func accesses(server, client bool, tools []string, export bool, emu *EmuNeeds) []access {
	emulated := emu != nil
	a := []access{
		{verb: "create", resource: "namespaces"},
		{verb: "delete", resource: "namespaces"},
		{verb: "list", resource: "namespaces"},
		{verb: "list", resource: "nodes"},
		{verb: "get", resource: "pods", namespaced: true},
		{verb: "list", resource: "pods", namespaced: true},
		{verb: "get", resource: "pods", subresource: "log", namespaced: true},
	}
	if server {
		a = append(a,
			access{verb: "create", group: "apps", resource: "deployments", namespaced: true},
			access{verb: "create", resource: "services", namespaced: true},
			access{verb: "get", resource: "nodes"})
		if export {
			a = append(a, access{verb: "create", group: "multicluster.x-k8s.io", resource: "serviceexports", namespaced: true})
		}
	}
	if client {
		a = append(a,
			access{verb: "create", resource: "pods", namespaced: true},
			access{verb: "create", resource: "pods", subresource: "exec", namespaced: true})
	}
	if emulated && server {
		a = append(a, access{verb: "create", resource: "pods", subresource: "exec", namespaced: true})
	}
	if emulated && client {
		a = append(a,
			access{verb: "create", resource: "services", namespaced: true},
			access{verb: "get", resource: "nodes"})
	}
	if hasTool(tools, "strait") {
		a = append(a,
			access{verb: "create", group: "strait.dev", resource: "accesspolicies"},
			access{verb: "deletecollection", group: "strait.dev", resource: "accesspolicies"})
	}
	if emulated {
		for _, r := range emu.Rights {
			// RBAC writes a subresource after its resource: pods/log.
			resource, sub, _ := strings.Cut(r.Resource, "/")
			a = append(a, access{verb: r.Verb, group: r.Group, resource: resource, subresource: sub, namespaced: true, namespace: emu.Namespace})
		}
	}
	return a
}

// unitNamespacePrefix names every unit's namespace: a check of namespaced
// access asks about a namespace of that form.
const unitNamespacePrefix = "strait-lab-"

// preflight checks one reachable cluster: the user may do what a unit
// (and with emu, the emulator) does, the emulator's namespace admits its
// pods, the nodes run Linux; and it returns what the metadata records.
func preflight(ctx context.Context, c *conn, server, client bool, tools []string, export bool, emu *EmuNeeds) (*ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	info := &ClusterInfo{Server: c.cfg.Host}
	var denied []string
	for _, a := range accesses(server, client, tools, export, emu) {
		ra := &authv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource}
		switch {
		case a.namespace != "":
			ra.Namespace = a.namespace
		case a.namespaced:
			ra.Namespace = unitNamespacePrefix + "x"
		}
		r, err := c.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: access review of %s: %w", c.name, a, err)
		}
		if !r.Status.Allowed {
			denied = append(denied, a.String()+" ("+a.where()+")")
		}
	}
	if len(denied) > 0 {
		return nil, fmt.Errorf("cluster %s: RBAC: the kubeconfig's user may not %s", c.name, strings.Join(denied, "; "))
	}
	if emu != nil {
		if err := admits(ctx, c, emu); err != nil {
			return nil, err
		}
	}
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: list nodes: %w", c.name, err)
	}
	linux := 0
	for _, n := range nodes.Items {
		ni := n.Status.NodeInfo
		var addrs []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				addrs = append(addrs, a.Address)
			}
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		info.Nodes = append(info.Nodes, NodeInfo{Name: n.Name, OS: ni.OperatingSystem, Arch: ni.Architecture, Kernel: ni.KernelVersion,
			OSImage: ni.OSImage, ContainerRuntime: ni.ContainerRuntimeVersion, Kubelet: ni.KubeletVersion,
			PodCIDRs: strings.Join(n.Spec.PodCIDRs, ","), Addresses: strings.Join(addrs, ","), Ready: ready})
		if ni.OperatingSystem == "linux" && ready && !n.Spec.Unschedulable {
			linux++
		}
	}
	if linux == 0 {
		var what []string
		for _, n := range info.Nodes {
			what = append(what, fmt.Sprintf("%s (os %q, ready %v)", n.Name, n.OS, n.Ready))
		}
		return nil, fmt.Errorf("cluster %s: no ready, schedulable Linux node to run the workloads on (nodes: %s)", c.name, strings.Join(what, ", "))
	}
	info.CNI = detectCNI(ctx, c, nodes.Items)
	if hasTool(tools, "strait") {
		if _, err := c.cs.AppsV1().Deployments("strait-system").Get(ctx, "strait-gateway", metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("cluster %s: tool strait: no Deployment strait-system/strait-gateway: install deploy/ first (README, \"Deploying\")", c.name)
			}
			return nil, fmt.Errorf("cluster %s: tool strait: get Deployment strait-system/strait-gateway: %w", c.name, err)
		}
	}
	return info, nil
}

// podSecurityLevels ranks PodSecurity's levels from the most to the least
// restrictive: a namespace admits the pods of its level and of those
// before it.
var podSecurityLevels = []string{"restricted", "baseline", "privileged"}

// admits checks that emu's namespace exists and that its PodSecurity
// enforce label admits emu's pods. A namespace without the label is taken
// to admit them: a cluster-wide default (the API server's
// AdmissionConfiguration) is not visible through the API, and the
// DaemonSet's FailedCreate event names it then (docs/lab-clusters.md).
func admits(ctx context.Context, c *conn, emu *EmuNeeds) error {
	if emu.Namespace == "" || emu.PodSecurity == "" {
		return nil
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(ctx, emu.Namespace, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster %s: link emulation: get namespace %s (its PodSecurity level): %w", c.name, emu.Namespace, err)
	}
	const label = "pod-security.kubernetes.io/enforce"
	lvl := ns.Labels[label]
	if lvl == "" {
		// No level (or an empty one, which the API server ignores too).
		return nil
	}
	has, need := slices.Index(podSecurityLevels, lvl), slices.Index(podSecurityLevels, emu.PodSecurity)
	if need < 0 {
		return fmt.Errorf("cluster %s: link emulation needs PodSecurity %q, not one of %v", c.name, emu.PodSecurity, podSecurityLevels)
	}
	if has < 0 || has < need {
		return fmt.Errorf("cluster %s: link emulation: namespace %s enforces PodSecurity %q (label %s), which refuses %s (it needs %q)",
			c.name, emu.Namespace, lvl, label, emu.What, emu.PodSecurity)
	}
	return nil
}

// gatewayPort is the WAN port of the strait gateways of cluster c: the
// container port named "wan" of strait-system/strait-gateway (deploy/),
// whose sessions an emulated unit resets (ClusterMap.Sessions).
func gatewayPort(ctx context.Context, c *conn) (uint16, error) {
	d, err := c.cs.AppsV1().Deployments("strait-system").Get(ctx, "strait-gateway", metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("cluster %s: tool strait: get Deployment strait-system/strait-gateway: %w", c.name, err)
	}
	for _, ct := range d.Spec.Template.Spec.Containers {
		for _, p := range ct.Ports {
			if p.Name == "wan" && p.ContainerPort > 0 && p.ContainerPort < 65536 {
				return uint16(p.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("cluster %s: tool strait: Deployment strait-system/strait-gateway has no container port named wan (deploy/gateway.yaml names it) to reset the gateways' sessions by; name it, or set sessions: keep in the clusters file", c.name)
}

// cniNames are DaemonSets (in kube-system or their own namespaces) that
// name the CNI they run.
var cniNames = []string{"cilium", "calico", "flannel", "weave", "kindnet", "antrea", "canal", "kube-router", "ovn", "multus"}

// cniAnnotations are node annotation prefixes that name the CNI that
// wrote them.
var cniAnnotations = map[string]string{
	"flannel.alpha.coreos.com/": "flannel",
	"projectcalico.org/":        "calico",
	"io.cilium":                 "cilium",
	"network.cilium.io/":        "cilium",
	"kube-router.io/":           "kube-router",
	"k8s.ovn.org/":              "ovn-kubernetes",
}

// detectCNI names the cluster's CNI as well as the API shows it: a known
// DaemonSet, else "unknown" with what was looked at. A CNI configured on
// the nodes without a DaemonSet (bridge, as scripts/k8s-nodes.sh) is not
// visible through the API.
func detectCNI(ctx context.Context, c *conn, nodes []corev1.Node) string {
	var found []string
	// Some CNIs annotate the nodes they run on.
	seen := map[string]bool{}
	for _, n := range nodes {
		for k := range n.Annotations {
			for prefix, cni := range cniAnnotations {
				if strings.HasPrefix(k, prefix) && !seen[cni] {
					seen[cni] = true
					found = append(found, cni+" (node annotation "+k+")")
				}
			}
		}
	}
	ds, err := c.cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "unknown (list DaemonSets: " + err.Error() + ")"
	}
	for _, d := range ds.Items {
		for _, n := range cniNames {
			if strings.Contains(d.Name, n) {
				found = append(found, n+" (DaemonSet "+d.Namespace+"/"+d.Name+")")
				break
			}
		}
	}
	if len(found) == 0 {
		return "unknown (no known CNI DaemonSet or node annotation; node-level plugins are not visible through the API)"
	}
	return strings.Join(found, ", ")
}
