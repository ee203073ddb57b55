package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/k8s/api"
)

// GatewayResources derives a gateway's configuration from the cluster's
// objects: every Peer and AccessPolicy; a Workload for every running pod
// with an IP, off the host network (workloads.go); an export for every valid
// ServiceExport, with a target per port of the Service, its cluster IP and
// the port (a headless Service's first ready endpoint for the port, left
// out while it has none); an import for every
// ClusterSetIP ServiceImport that has an IP, from the clusters in its
// status other than this one. Invalid objects are skipped and reported in
// the returned problems.
func (c *Controller) GatewayResources(ctx context.Context) (rs []catalog.Resource, problems []string, err error) {
	var peers api.PeerList
	if err := c.client.List(ctx, &peers); err != nil {
		return nil, nil, fmt.Errorf("list peers: %w", err)
	}
	for _, p := range peers.Items {
		if p.Name == c.cfg.Cluster {
			continue
		}
		rs = append(rs, &catalog.Peer{Metadata: catalog.ObjectMeta{Name: p.Name}, Spec: p.Spec})
	}
	var pols api.AccessPolicyList
	if err := c.client.List(ctx, &pols); err != nil {
		return nil, nil, fmt.Errorf("list accesspolicies: %w", err)
	}
	for _, p := range pols.Items {
		rs = append(rs, &catalog.AccessPolicy{Metadata: catalog.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
	}
	wls, err := c.workloads(ctx)
	if err != nil {
		return nil, nil, err
	}
	rs = append(rs, wls...)
	exports, err := c.localExports(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, le := range exports {
		if le.svc == nil {
			continue
		}
		targets, err := c.targets(ctx, le.svc)
		if err != nil {
			// Not a problem to skip: the push would delete the export
			// from the gateways over a failed list.
			return nil, nil, err
		}
		// Every port carries its own target, so spec.target stays empty;
		// clusterExport lists the ports in the Service's order.
		var ports []catalog.ServicePort
		for i, p := range le.clusterExport(c.cfg.Cluster).Ports {
			if targets[i] == "" {
				problems = append(problems, fmt.Sprintf("export %s/%s: headless service has no ready endpoint for port %q", le.svc.Namespace, le.svc.Name, p.Name))
				continue
			}
			p.Target = targets[i]
			ports = append(ports, p)
		}
		if len(ports) == 0 {
			continue
		}
		rs = append(rs, &catalog.ServiceExport{
			Metadata: catalog.ObjectMeta{Name: le.obj.Name, Namespace: le.obj.Namespace, Labels: le.svc.Labels},
			Spec:     catalog.ServiceExportSpec{Ports: ports},
		})
	}
	var imports mcs.ServiceImportList
	if err := c.client.List(ctx, &imports); err != nil {
		return nil, nil, fmt.Errorf("list serviceimports: %w", err)
	}
	for _, si := range imports.Items {
		if si.Spec.Type == mcs.Headless || len(si.Spec.IPs) == 0 {
			continue // the gateway proxies through a clusterset IP only
		}
		imp := &catalog.ServiceImport{
			Metadata: catalog.ObjectMeta{Name: si.Name, Namespace: si.Namespace, Labels: si.Labels},
			Spec:     catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: si.Spec.IPs},
		}
		for _, p := range si.Spec.Ports {
			imp.Spec.Ports = append(imp.Spec.Ports, catalog.ServicePort{Name: p.Name, Protocol: catalog.Protocol(p.Protocol), AppProtocol: deref(p.AppProtocol), Port: p.Port})
		}
		for _, cs := range si.Status.Clusters {
			if cs.Cluster != c.cfg.Cluster {
				imp.Spec.Clusters = append(imp.Spec.Clusters, catalog.ClusterStatus{Cluster: cs.Cluster})
			}
		}
		if len(imp.Spec.Clusters) == 0 {
			continue // no remote source (yet): nothing to dial
		}
		rs = append(rs, imp)
	}
	// What the gateway would refuse is left out, so one bad object does
	// not block the configuration of every other.
	valid := rs[:0]
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r.Key(), err))
			continue
		}
		valid = append(valid, r)
	}
	return valid, problems, nil
}

// targets returns where the exporting gateway sends each port's
// connections, in the order of svc.Spec.Ports: the cluster IP and the port
// (kube-proxy maps it to the pods' target port), or for a headless Service
// a ready endpoint with the EndpointSlice port of the same name; "" for a
// headless port without a ready endpoint.
func (c *Controller) targets(ctx context.Context, svc *corev1.Service) ([]string, error) {
	out := make([]string, len(svc.Spec.Ports))
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		for i, p := range svc.Spec.Ports {
			out[i] = net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
		}
		return out, nil
	}
	var list discoveryv1.EndpointSliceList
	if err := c.client.List(ctx, &list, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return nil, fmt.Errorf("list endpointslices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	for i, port := range svc.Spec.Ports {
	search:
		for _, es := range list.Items {
			for _, p := range es.Ports {
				if p.Port == nil || deref(p.Name) != port.Name {
					continue
				}
				for _, ep := range es.Endpoints {
					if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 {
						out[i] = net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(*p.Port)))
						break search
					}
				}
			}
		}
	}
	return out, nil
}

// syncGateways pushes the derived configuration to every gateway: apply
// what is wanted, delete what is not. A gateway that cannot be reached is
// an error (retried with backoff) that does not stop the others.
func (c *Controller) syncGateways(ctx context.Context) error {
	want, problems, err := c.GatewayResources(ctx)
	if err != nil {
		return err
	}
	for _, p := range problems {
		c.log.Warn("not configured on the gateways", "problem", p)
	}
	var buf bytes.Buffer
	if err := catalog.Encode(&buf, want); err != nil {
		return fmt.Errorf("encode gateway resources: %w", err)
	}
	wantKeys := map[catalog.Key]bool{}
	for _, r := range want {
		wantKeys[r.Key()] = true
	}
	var errs []error
	for _, sock := range c.cfg.GatewayAdmin {
		if err := pushGateway(gateway.NewAdminClient(sock), buf.Bytes(), wantKeys); err != nil {
			errs = append(errs, fmt.Errorf("gateway %s: %w", sock, err))
		}
	}
	return errors.Join(errs...)
}

func pushGateway(ac *gateway.AdminClient, want []byte, wantKeys map[catalog.Key]bool) error {
	cur, err := ac.Get("")
	if err != nil {
		return err
	}
	have, err := catalog.Parse(bytes.NewReader(cur))
	if err != nil {
		return fmt.Errorf("parse the gateway's resources: %w", err)
	}
	stale := slices.DeleteFunc(have, func(r catalog.Resource) bool { return wantKeys[r.Key()] })
	if len(stale) > 0 {
		var buf bytes.Buffer
		if err := catalog.Encode(&buf, stale); err != nil {
			return err
		}
		if _, err := ac.Delete(buf.Bytes()); err != nil {
			return fmt.Errorf("delete stale resources: %w", err)
		}
	}
	if len(wantKeys) == 0 {
		return nil
	}
	res, err := ac.Apply(want)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if res.Warning != "" {
		return fmt.Errorf("applied, but: %s", res.Warning)
	}
	return nil
}
