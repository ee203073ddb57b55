package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/strait-net/strait/catalog"
)

// Pods are the clients of the gateways: a gateway knows a connection's
// source only by its address, so that AccessPolicies selecting pods by
// namespace and labels work, the controller pushes one Workload per
// running Pod with the pod's IPs (README, "The interconnect").
//
// What it costs per pod: the controller's cache keeps a stripped copy
// (name, namespace, labels, phase, IPs: stripPod), and every push to a
// gateway carries one Workload of about 250 bytes of YAML (three labels,
// one IP; a push is bounded by catalog.MaxInput, 16 MiB: some 60 000
// pods); the gateway keeps one map entry per address. A push sends every
// resource, so one pass costs O(pods) to encode and for the gateway to
// parse and compare, while the gateway realizes only what changed. Pod
// events that change none of what a Workload holds (container statuses,
// conditions: most pod updates) enqueue nothing (podChanges).

// workloadOf returns the Workload of a pod, or nil if the pod has none:
// not running, no IP yet, or on the host network (its address is the
// node's, shared with every other host-network pod and the node itself,
// so it says nothing about the pod).
func workloadOf(p *corev1.Pod) *catalog.Workload {
	if p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning {
		return nil
	}
	var addrs []string
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return // the API server validates pod IPs; nothing to trust here otherwise
		}
		// Canonical and unmapped, as catalog's validation wants.
		c := a.Unmap().String()
		for _, x := range addrs {
			if x == c {
				return
			}
		}
		addrs = append(addrs, c)
	}
	add(p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if len(addrs) == 0 {
		return nil
	}
	return &catalog.Workload{
		Metadata: catalog.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
		Spec:     catalog.WorkloadSpec{Addresses: addrs},
	}
}

// workloads lists the Workloads of the cluster's pods.
func (c *Controller) workloads(ctx context.Context) ([]catalog.Resource, error) {
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []catalog.Resource
	for i := range pods.Items {
		if w := workloadOf(&pods.Items[i]); w != nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// stripPod is the cache's transform for pods: it keeps what workloadOf
// reads (and what the cache itself needs), so a large cluster's pod specs
// and statuses do not sit in the controller's memory.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone: the cache keeps it as it is
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// podChanges lets through the pod events that change a Workload: most
// pod updates are status churn the gateways do not care about, and each
// event that passes costs a pass over the whole cluster.
func podChanges() predicate.Predicate {
	of := func(o any) *catalog.Workload {
		if p, ok := o.(*corev1.Pod); ok {
			return workloadOf(p)
		}
		return nil
	}
	return predicate.Funcs{
		CreateFunc: func(e ctrlevent.CreateEvent) bool { return of(e.Object) != nil },
		UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
			return !reflect.DeepEqual(of(e.ObjectOld), of(e.ObjectNew))
		},
		DeleteFunc:  func(e ctrlevent.DeleteEvent) bool { return true },
		GenericFunc: func(e ctrlevent.GenericEvent) bool { return true },
	}
}
