package k8s

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
)

// ClusterExport is one cluster's export of a service, as the clusterset
// sees it.
type ClusterExport struct {
	Cluster   string
	Namespace string
	Name      string
	Type      mcs.ServiceImportType
	Ports     []catalog.ServicePort
	// Created is when the ServiceExport was created: the oldest export of a
	// service wins its conflicts (KEP-1645 "Constraints and conflict
	// resolution").
	Created time.Time
}

// Conflict is why an export lost: the MCS reasons (PortConflict,
// TypeConflict) and a message naming the fields, the winner and why it won.
type Conflict struct {
	Reasons []mcs.ServiceExportConditionReason
	Message string
}

// Reason joins the reasons with commas, as the MCS API asks for several.
func (c Conflict) Reason() string {
	rs := make([]string, len(c.Reasons))
	for i, r := range c.Reasons {
		rs[i] = string(r)
	}
	return strings.Join(rs, ",")
}

// Service is the clusterset's view of one exported service: the merged
// properties every importing cluster uses.
type Service struct {
	Namespace string
	Name      string
	Type      mcs.ServiceImportType
	Ports     []catalog.ServicePort
	// Clusters are the exporting clusters, sorted.
	Clusters []string
	// Winner is the cluster with the oldest export.
	Winner string
	// Conflicts holds the clusters whose export conflicts with the merged
	// properties; absent clusters have none.
	Conflicts map[string]Conflict
}

// ServiceKey is namespace/name.
type ServiceKey struct{ Namespace, Name string }

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Merge resolves every service's exports into one Service, following the
// MCS API: the oldest export (ties broken by cluster ID, so every cluster
// computes the same answer) decides the type; ports are merged — the union
// of every export's ports, a port identified by its name, or by protocol
// and number when unnamed — and an export whose port clashes with one
// already merged (same name but another protocol or number, or the same
// protocol and number under another name) has a PortConflict and keeps
// only its other ports merged.
func Merge(exports []ClusterExport) map[ServiceKey]*Service {
	byKey := map[ServiceKey][]ClusterExport{}
	for _, e := range exports {
		k := ServiceKey{e.Namespace, e.Name}
		byKey[k] = append(byKey[k], e)
	}
	out := make(map[ServiceKey]*Service, len(byKey))
	for k, es := range byKey {
		sort.Slice(es, func(i, j int) bool {
			if !es[i].Created.Equal(es[j].Created) {
				return es[i].Created.Before(es[j].Created)
			}
			return es[i].Cluster < es[j].Cluster
		})
		win := es[0]
		s := &Service{Namespace: k.Namespace, Name: k.Name, Type: win.Type, Winner: win.Cluster, Conflicts: map[string]Conflict{}}
		why := fmt.Sprintf("cluster %s's export is the oldest (created %s)", win.Cluster, win.Created.UTC().Format(time.RFC3339))
		byName := map[string]catalog.ServicePort{}
		byNumber := map[string]catalog.ServicePort{}
		for _, e := range es {
			s.Clusters = append(s.Clusters, e.Cluster)
			var c Conflict
			var msgs []string
			if e.Type != s.Type {
				c.Reasons = append(c.Reasons, mcs.ServiceExportReasonTypeConflict)
				msgs = append(msgs, fmt.Sprintf("type %s, clusterset uses %s", e.Type, s.Type))
			}
			portClash := false
			for _, p := range e.Ports {
				p = normPort(p)
				num := string(p.Protocol) + "/" + strconv.Itoa(int(p.Port))
				if q, ok := byName[p.Name]; ok && p.Name != "" {
					if q.Protocol != p.Protocol || q.Port != p.Port {
						portClash = true
						msgs = append(msgs, fmt.Sprintf("port %q is %s, clusterset uses %s/%d", p.Name, num, q.Protocol, q.Port))
					}
					continue
				}
				if q, ok := byNumber[num]; ok {
					if q.Name != p.Name {
						portClash = true
						msgs = append(msgs, fmt.Sprintf("port %s is named %q, clusterset names it %q", num, p.Name, q.Name))
					}
					continue
				}
				byNumber[num] = p
				if p.Name != "" {
					byName[p.Name] = p
				}
				s.Ports = append(s.Ports, p)
			}
			// The winner's ports are the clusterset's: a clash inside its
			// own list (which the Service API forbids, but a peer's broker
			// entry may carry) keeps the first port and is no conflict.
			if portClash && e.Cluster != win.Cluster {
				c.Reasons = append(c.Reasons, mcs.ServiceExportReasonPortConflict)
			}
			if len(c.Reasons) > 0 {
				c.Message = strings.Join(msgs, "; ") + "; " + why
				s.Conflicts[e.Cluster] = c
			}
		}
		sort.Strings(s.Clusters)
		s.Ports = sortPorts(s.Ports)
		out[k] = s
	}
	return out
}

func normPort(p catalog.ServicePort) catalog.ServicePort {
	if p.Protocol == "" {
		p.Protocol = catalog.TCP
	}
	return p
}

// sortPorts orders ports by number then protocol, so the merged list does
// not depend on the order exports arrive in.
func sortPorts(ps []catalog.ServicePort) []catalog.ServicePort {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Port != ps[j].Port {
			return ps[i].Port < ps[j].Port
		}
		return ps[i].Protocol < ps[j].Protocol
	})
	return ps
}
