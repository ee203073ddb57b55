package k8s

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// permission is one thing the controller does on the API server.
type permission struct {
	verb, group, resource, subresource, namespace string
}

func (p permission) String() string {
	r := p.resource
	if p.group != "" {
		r += "." + p.group
	}
	if p.subresource != "" {
		r += "/" + p.subresource
	}
	if p.namespace != "" {
		r += " in namespace " + p.namespace
	}
	return p.verb + " " + r
}

// permissions lists what the controller needs: reads for its caches
// everywhere, pods when it pushes to gateways (their Workloads), and
// writes only in writer mode. deploy/rbac.yaml grants exactly these (a
// test checks the controller and the gateway sidecar run bound to it).
func permissions(syncOnly, gateways, leaderElection bool, leaseNS string) []permission {
	var ps []permission
	read := func(group, resource string) {
		for _, v := range []string{"get", "list", "watch"} {
			ps = append(ps, permission{verb: v, group: group, resource: resource})
		}
	}
	read("multicluster.x-k8s.io", "serviceexports")
	read("multicluster.x-k8s.io", "serviceimports")
	read("", "services")
	read("discovery.k8s.io", "endpointslices")
	read("strait.dev", "peers")
	read("strait.dev", "accesspolicies")
	if gateways {
		// The cache lists and watches; nothing gets a single pod.
		for _, v := range []string{"list", "watch"} {
			ps = append(ps, permission{verb: v, resource: "pods"})
		}
	}
	if syncOnly {
		return ps
	}
	write := func(group, resource, sub string, verbs ...string) {
		for _, v := range verbs {
			ps = append(ps, permission{verb: v, group: group, resource: resource, subresource: sub})
		}
	}
	write("multicluster.x-k8s.io", "serviceexports", "status", "update")
	write("multicluster.x-k8s.io", "serviceimports", "", "create", "update", "delete")
	write("multicluster.x-k8s.io", "serviceimports", "status", "update")
	write("discovery.k8s.io", "endpointslices", "", "create", "update", "delete")
	write("strait.dev", "peers", "", "create", "update", "delete")
	write("", "events", "", "create", "patch")
	if leaderElection {
		for _, v := range []string{"get", "create", "update"} {
			ps = append(ps, permission{verb: v, group: "coordination.k8s.io", resource: "leases", namespace: leaseNS})
		}
	}
	return ps
}

// checkAccess asks the API server (SelfSubjectAccessReview, which every
// authenticated user may) whether the controller's identity has every
// permission it needs, and names all that are missing.
func checkAccess(ctx context.Context, cfg *rest.Config, syncOnly, gateways, leaderElection bool, leaseNS string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var missing []string
	for _, p := range permissions(syncOnly, gateways, leaderElection, leaseNS) {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource, Namespace: p.namespace,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("check permissions at %s: %w", cfg.Host, err)
		}
		if !r.Status.Allowed {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("rbac: this identity may not %s (bind the ClusterRole in deploy/rbac.yaml)", strings.Join(missing, ", "))
	}
	return nil
}
