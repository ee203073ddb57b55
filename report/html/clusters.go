package html

import (
	"github.com/strait-net/strait/report"
	"maps"
	"slices"
	"strings"
)

// clustersView is the page's clusters section, in display order.
type clustersView struct {
	Clusters  []clusterRow
	Nodes     []nodeRow
	Direct    []unitValue
	Emulation []emulationRow
}

type clusterRow struct {
	Name, Role string
	*report.ClusterInfo
}

type nodeRow struct {
	Cluster string
	report.ClusterNode
}

type unitValue struct{ Unit, Value string }

type emulationRow struct {
	Unit string
	report.ClusterEmulation
	Remote []unitValue // cluster → its remote, comma separated
}

// clustersView orders c for the page; nil without clusters (a run in the
// namespace lab), so that page shows no section.
func newClustersView(c *report.ClusterRun) *clustersView {
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
