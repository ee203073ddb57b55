package k8s

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/k8s/api"
)

// Reconcile is one pass over the whole cluster (see the package comment).
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var errs []error
	if !c.cfg.SyncOnly {
		if err := c.reconcileClusterset(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.cfg.GatewayAdmin) > 0 {
		if err := c.syncGateways(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// localExport is a ServiceExport with what the pass found about it.
type localExport struct {
	obj     *mcs.ServiceExport
	svc     *corev1.Service // nil if missing
	invalid mcs.ServiceExportConditionReason
	msg     string
}

// localExports reads every ServiceExport and checks it against its
// Service (MCS: the export is valid if a Service of the same name and
// namespace exists and is not ExternalName).
func (c *Controller) localExports(ctx context.Context) ([]*localExport, error) {
	var list mcs.ServiceExportList
	if err := c.client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list serviceexports: %w", err)
	}
	var out []*localExport
	for i := range list.Items {
		se := &list.Items[i]
		if se.DeletionTimestamp != nil {
			continue
		}
		le := &localExport{obj: se}
		svc := &corev1.Service{}
		err := c.client.Get(ctx, types.NamespacedName{Namespace: se.Namespace, Name: se.Name}, svc)
		switch {
		case apierrors.IsNotFound(err):
			le.invalid, le.msg = mcs.ServiceExportReasonNoService, fmt.Sprintf("service %s/%s does not exist", se.Namespace, se.Name)
		case err != nil:
			return nil, fmt.Errorf("get service %s/%s: %w", se.Namespace, se.Name, err)
		case svc.Spec.Type == corev1.ServiceTypeExternalName:
			le.invalid, le.msg = mcs.ServiceExportReasonInvalidServiceType, fmt.Sprintf("service %s/%s is of type ExternalName, which cannot be exported", se.Namespace, se.Name)
		case len(svc.Spec.Ports) == 0:
			le.invalid, le.msg = mcs.ServiceExportReasonInvalidServiceType, fmt.Sprintf("service %s/%s has no ports", se.Namespace, se.Name)
		default:
			le.svc = svc
		}
		out = append(out, le)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].obj, out[j].obj
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return out, nil
}

func (le *localExport) clusterExport(cluster string) ClusterExport {
	ce := ClusterExport{Cluster: cluster, Namespace: le.obj.Namespace, Name: le.obj.Name, Type: mcs.ClusterSetIP,
		Created: le.obj.CreationTimestamp.Time}
	if le.svc.Spec.ClusterIP == corev1.ClusterIPNone {
		ce.Type = mcs.Headless
	}
	for _, p := range le.svc.Spec.Ports {
		ce.Ports = append(ce.Ports, catalog.ServicePort{Name: p.Name, Protocol: catalog.Protocol(p.Protocol),
			AppProtocol: deref(p.AppProtocol), Port: p.Port})
	}
	return ce
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (c *Controller) reconcileClusterset(ctx context.Context) error {
	exports, err := c.localExports(ctx)
	if err != nil {
		return err
	}
	st := broker.ClusterState{}
	for _, a := range c.cfg.GatewayWAN {
		st.Gateways = append(st.Gateways, broker.Gateway{Addr: a, Healthy: true})
	}
	for _, le := range exports {
		if le.svc != nil {
			st.Exports = append(st.Exports, brokerExport(le.clusterExport(c.cfg.Cluster)))
		}
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.publishTimeout())
	pubErr := c.cfg.Clusterset.Publish(pctx, st)
	cancel()

	// The view: the broker's catalog with this cluster's state as just
	// published (the broker's echo may lag behind).
	view := &broker.Catalog{Clusters: map[string]*broker.ClusterState{}}
	cat, synced := c.cfg.Clusterset.Catalog()
	if synced {
		for id, s := range cat.Clusters {
			view.Clusters[id] = s
		}
	}
	if pubErr == nil {
		view.Clusters[c.cfg.Cluster] = &st
	}
	merged := Merge(clusterExports(view))

	var errs []error
	if pubErr != nil {
		errs = append(errs, fmt.Errorf("publish to broker: %w", pubErr))
	}
	for _, le := range exports {
		if err := c.updateExportStatus(ctx, le, merged, pubErr); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.reconcileImports(ctx, merged, synced); err != nil {
		errs = append(errs, err)
	}
	if err := c.reconcilePeers(ctx, view, synced); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// updateExportStatus sets Valid, Ready and Conflict, writing only if a
// condition changed, and records an event when one turns bad.
func (c *Controller) updateExportStatus(ctx context.Context, le *localExport, merged map[ServiceKey]*Service, pubErr error) error {
	se := le.obj.DeepCopy()
	conds := &se.Status.Conditions
	gen := se.Generation
	set := func(t mcs.ServiceExportConditionType, s metav1.ConditionStatus, r mcs.ServiceExportConditionReason, msg string) bool {
		return meta.SetStatusCondition(conds, metav1.Condition{Type: string(t), Status: s, Reason: string(r), Message: msg, ObservedGeneration: gen})
	}
	var warn []string
	if le.svc == nil {
		if set(mcs.ServiceExportConditionValid, metav1.ConditionFalse, le.invalid, le.msg) {
			warn = append(warn, le.msg)
		}
		set(mcs.ServiceExportConditionReady, metav1.ConditionFalse, mcs.ServiceExportReasonFailed, "not exported: "+le.msg)
		meta.RemoveStatusCondition(conds, string(mcs.ServiceExportConditionConflict))
	} else {
		set(mcs.ServiceExportConditionValid, metav1.ConditionTrue, mcs.ServiceExportReasonValid, "service found")
		if pubErr != nil {
			set(mcs.ServiceExportConditionReady, metav1.ConditionFalse, mcs.ServiceExportReasonPending, "waiting for the broker: "+pubErr.Error())
		} else {
			set(mcs.ServiceExportConditionReady, metav1.ConditionTrue, mcs.ServiceExportReasonExported, "published to the clusterset")
		}
		if s := merged[ServiceKey{se.Namespace, se.Name}]; s != nil {
			if cf, ok := s.Conflicts[c.cfg.Cluster]; ok {
				if set(mcs.ServiceExportConditionConflict, metav1.ConditionTrue, mcs.ServiceExportConditionReason(cf.Reason()), cf.Message) {
					warn = append(warn, cf.Reason()+": "+cf.Message)
				}
			} else {
				set(mcs.ServiceExportConditionConflict, metav1.ConditionFalse, mcs.ServiceExportReasonNoConflicts, "no conflicts with other clusters' exports")
			}
		}
	}
	if reflect.DeepEqual(se.Status, le.obj.Status) {
		return nil
	}
	if err := c.client.Status().Update(ctx, se); err != nil {
		return fmt.Errorf("update status of serviceexport %s/%s: %w", se.Namespace, se.Name, err)
	}
	for _, w := range warn {
		c.events.Event(se, corev1.EventTypeWarning, "NotExported", w)
	}
	return nil
}

// managed selects the objects this controller created.
var managed = client.MatchingLabels{api.ManagedByLabel: api.ManagedBy}

// reconcileImports makes one ServiceImport per service some other cluster
// exports, with its EndpointSlices, and removes those no longer exported.
// Before the first broker view (synced false) it removes nothing.
func (c *Controller) reconcileImports(ctx context.Context, merged map[ServiceKey]*Service, synced bool) error {
	var all mcs.ServiceImportList
	if err := c.client.List(ctx, &all); err != nil {
		return fmt.Errorf("list serviceimports: %w", err)
	}
	used := map[netip.Addr]bool{}
	existing := map[ServiceKey]*mcs.ServiceImport{}
	for i := range all.Items {
		si := &all.Items[i]
		existing[ServiceKey{si.Namespace, si.Name}] = si
		for _, ip := range si.Spec.IPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				used[a] = true
			}
		}
	}
	var errs []error
	want := map[ServiceKey]bool{}
	keys := make([]ServiceKey, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		s := merged[k]
		if !slices.ContainsFunc(s.Clusters, func(id string) bool { return id != c.cfg.Cluster }) {
			continue // only this cluster exports it: nothing to import
		}
		want[k] = true
		si := existing[k]
		if si != nil && si.Labels[api.ManagedByLabel] != api.ManagedBy {
			// Someone else's object: not ours to change, and retrying
			// cannot fix it, so a warning and no error (no requeue).
			c.log.Warn("serviceimport exists and was not created by strait: left alone", "import", k.String())
			c.events.Event(si, corev1.EventTypeWarning, "NotManaged", "not created by strait, left alone: the clusterset's export of "+k.String()+" is not imported here")
			continue
		}
		if err := c.ensureImport(ctx, s, si, used); err != nil {
			errs = append(errs, err)
		}
	}
	var owned discoveryv1.EndpointSliceList
	if err := c.client.List(ctx, &owned, managed); err != nil {
		return errors.Join(append(errs, fmt.Errorf("list endpointslices: %w", err))...)
	}
	if synced {
		for k, si := range existing {
			if !want[k] && si.Labels[api.ManagedByLabel] == api.ManagedBy {
				if err := c.client.Delete(ctx, si); client.IgnoreNotFound(err) != nil {
					errs = append(errs, fmt.Errorf("delete serviceimport %s: %w", k, err))
				}
			}
		}
	}
	// Slices of imports that are gone or of clusters that stopped
	// exporting. Deleted explicitly: the owner reference alone relies on a
	// garbage collector, which not every API server runs.
	for i := range owned.Items {
		es := &owned.Items[i]
		k := ServiceKey{es.Namespace, es.Labels[mcs.LabelServiceName]}
		s := merged[k]
		keep := s != nil && want[k] && slices.Contains(s.Clusters, es.Labels[mcs.LabelSourceCluster]) && es.Labels[mcs.LabelSourceCluster] != c.cfg.Cluster
		if !keep && synced {
			if err := c.client.Delete(ctx, es); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("delete endpointslice %s/%s: %w", es.Namespace, es.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) ensureImport(ctx context.Context, s *Service, si *mcs.ServiceImport, used map[netip.Addr]bool) error {
	k := ServiceKey{s.Namespace, s.Name}
	create := si == nil
	if create {
		si = &mcs.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	}
	before := si.DeepCopy()
	if si.Labels == nil {
		si.Labels = map[string]string{}
	}
	si.Labels[api.ManagedByLabel] = api.ManagedBy
	si.Spec.Type = s.Type
	si.Spec.Ports = nil
	for _, p := range s.Ports {
		sp := mcs.ServicePort{Name: p.Name, Protocol: corev1.Protocol(p.Protocol), Port: p.Port}
		if p.AppProtocol != "" {
			sp.AppProtocol = &p.AppProtocol
		}
		si.Spec.Ports = append(si.Spec.Ports, sp)
	}
	if si.Spec.Ports == nil {
		si.Spec.Ports = []mcs.ServicePort{} // required by the CRD
	}
	// The clusterset IP stays for the import's life: an existing address
	// is kept, only an import without one gets one.
	if s.Type == mcs.Headless {
		si.Spec.IPs = nil
	} else if len(si.Spec.IPs) == 0 {
		ip, err := allocate(c.prefix, used)
		if err != nil {
			return fmt.Errorf("serviceimport %s: %w", k, err)
		}
		used[ip] = true
		si.Spec.IPs = []string{ip.String()}
	}
	switch {
	case create:
		if err := c.client.Create(ctx, si); err != nil {
			if apierrors.IsNotFound(err) {
				// MCS namespace sameness: the import appears once the
				// namespace exists here (its creation triggers nothing,
				// so the error makes the queue retry with backoff).
				return fmt.Errorf("serviceimport %s: namespace %s does not exist in this cluster", k, s.Namespace)
			}
			return fmt.Errorf("create serviceimport %s: %w", k, err)
		}
	case !reflect.DeepEqual(si.Spec, before.Spec) || !reflect.DeepEqual(si.Labels, before.Labels):
		if err := c.client.Update(ctx, si); err != nil {
			return fmt.Errorf("update serviceimport %s: %w", k, err)
		}
	}
	status := mcs.ServiceImportStatus{Conditions: si.Status.Conditions}
	for _, id := range s.Clusters {
		status.Clusters = append(status.Clusters, mcs.ClusterStatus{Cluster: id})
	}
	status.EndpointSliceObjects = mcs.EndpointSliceObjectsPresent
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: string(mcs.ServiceImportConditionReady),
		Status: metav1.ConditionTrue, Reason: string(mcs.ServiceImportReasonReady), Message: "imported from " + strings.Join(s.Clusters, ", ")})
	if !reflect.DeepEqual(status, si.Status) {
		si.Status = status
		if err := c.client.Status().Update(ctx, si); err != nil {
			return fmt.Errorf("update status of serviceimport %s: %w", k, err)
		}
	}
	var errs []error
	for _, id := range s.Clusters {
		if id == c.cfg.Cluster {
			continue
		}
		if err := c.ensureSlice(ctx, si, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sliceName is the name of the EndpointSlice of one source cluster.
func sliceName(service, cluster string) string { return service + "-" + cluster }

// ensureSlice makes the EndpointSlice that sends the import's traffic for
// one source cluster to this cluster's gateways.
func (c *Controller) ensureSlice(ctx context.Context, si *mcs.ServiceImport, cluster string) error {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: si.Namespace, Name: sliceName(si.Name, cluster)}}
	op, err := controllerutil.CreateOrUpdate(ctx, c.client, es, func() error {
		es.Labels = map[string]string{
			mcs.LabelServiceName:   si.Name,
			mcs.LabelSourceCluster: cluster,
			api.ManagedByLabel:     api.ManagedBy,
		}
		es.AddressType = discoveryv1.AddressTypeIPv4
		es.Endpoints = nil
		for _, ip := range c.cfg.GatewayIPs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
		}
		es.Ports = nil
		for _, p := range si.Spec.Ports {
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr(p.Name), Protocol: ptr(p.Protocol), Port: ptr(p.Port), AppProtocol: p.AppProtocol})
		}
		return controllerutil.SetControllerReference(si, es, c.client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", es.Namespace, es.Name, err)
	}
	if op != controllerutil.OperationResultNone {
		c.log.Debug("endpointslice", "op", op, "namespace", es.Namespace, "name", es.Name)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// reconcilePeers writes a Peer per other cluster with gateways, so the
// gateway configuration (derived from the cluster's objects alone) knows
// where to dial.
func (c *Controller) reconcilePeers(ctx context.Context, view *broker.Catalog, synced bool) error {
	var errs []error
	want := map[string]bool{}
	for _, id := range view.ClusterIDs() {
		gws := sortedGateways(view.Clusters[id].Gateways)
		if id == c.cfg.Cluster || len(gws) == 0 {
			continue
		}
		want[id] = true
		p := &api.Peer{ObjectMeta: metav1.ObjectMeta{Name: id}}
		_, err := controllerutil.CreateOrUpdate(ctx, c.client, p, func() error {
			if p.Labels[api.ManagedByLabel] != api.ManagedBy && !p.CreationTimestamp.IsZero() {
				return fmt.Errorf("peer %s exists and was not created by strait: left alone", id)
			}
			p.Labels = map[string]string{api.ManagedByLabel: api.ManagedBy}
			p.Spec.Gateways = gws
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", id, err))
		}
	}
	if !synced {
		return errors.Join(errs...)
	}
	var list api.PeerList
	if err := c.client.List(ctx, &list, managed); err != nil {
		return errors.Join(append(errs, fmt.Errorf("list peers: %w", err))...)
	}
	for i := range list.Items {
		if p := &list.Items[i]; !want[p.Name] {
			if err := c.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("delete peer %s: %w", p.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
