package k8s

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/broker"
	"github.com/strait-net/strait/catalog"
)

// FuzzMerge decodes exports from the broker's form (labels included, as
// any peer may publish them) and checks Merge's contract: the result does
// not depend on the order exports arrive in — every cluster must compute
// the same — the winner has no conflict, and merged ports are unique by
// name and by protocol and number.
func FuzzMerge(f *testing.F) {
	f.Add([]byte{0, 1, 80, 1, 1, 2, 80, 0}, "1700000000", "Headless")
	f.Add([]byte{0, 0, 80, 0, 1, 0, 81, 0, 2, 0, 80, 3}, "x", "ClusterSetIP")
	f.Add([]byte{0, 4, 80, 0, 1, 0, 81, 0}, "99999999999999", "Headless")
	f.Add([]byte{0, 4, 80, 0, 1, 0, 81, 0}, "-5", "ClusterSetIP")
	// Edges: no exports, labels empty, past int64, at and beyond the
	// believed range, not decimal, invalid UTF-8.
	f.Add([]byte{}, "", "")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81, 0}, "9223372036854775808", "Headless")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81, 0}, "1099511627776", "ClusterSetIP")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81, 0}, "1099511627775", "ClusterSetIP")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81, 0}, "+5", "clustersetip")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81, 0}, "1e9", "\xff\xfe")
	f.Add([]byte{0, 4, 80, 0, 1, 4, 81}, "\xc3", "Headless")
	f.Fuzz(func(t *testing.T, data []byte, created, typ string) {
		cat := &broker.Catalog{Clusters: map[string]*broker.ClusterState{}}
		names := []string{"", "http", "web"}
		protos := []catalog.Protocol{catalog.TCP, catalog.UDP}
		for i := 0; i+3 < len(data); i += 4 {
			cluster := fmt.Sprintf("c%d", data[i]%4)
			st := cat.Clusters[cluster]
			if st == nil {
				st = &broker.ClusterState{}
				cat.Clusters[cluster] = st
			}
			labels := map[string]string{createdLabel: strconv.Itoa(int(data[i+1] % 3)), typeLabel: "ClusterSetIP"}
			if data[i+1]%5 == 4 {
				labels = map[string]string{createdLabel: created, typeLabel: typ}
			}
			name := fmt.Sprintf("s%d", data[i+3]%2)
			p := catalog.ServicePort{Name: names[int(data[i+3]/2)%3], Protocol: protos[int(data[i+3]/8)%2], Port: int32(data[i+2]%3) + 80}
			// One export per cluster and service, as the broker keys them.
			if j := slices.IndexFunc(st.Exports, func(e broker.Export) bool { return e.Name == name }); j >= 0 {
				st.Exports[j].Ports = append(st.Exports[j].Ports, p)
				continue
			}
			st.Exports = append(st.Exports, broker.Export{Namespace: "ns", Name: name, Ports: []catalog.ServicePort{p}, Labels: labels})
		}
		exports := clusterExports(cat)
		for _, e := range exports {
			if e.Type != mcs.ClusterSetIP && e.Type != mcs.Headless {
				t.Fatalf("decoded type %q", e.Type)
			}
			if e.Created.Before(time.Unix(0, 0)) || e.Created.After(time.Unix(maxCreated, 0)) {
				t.Fatalf("decoded creation time %v", e.Created)
			}
		}
		got := Merge(exports)
		rev := slices.Clone(exports)
		slices.Reverse(rev)
		if again := Merge(rev); !reflect.DeepEqual(got, again) {
			t.Fatalf("Merge depends on input order:\n%+v\n%+v", got, again)
		}
		for k, s := range got {
			if _, ok := s.Conflicts[s.Winner]; ok {
				t.Fatalf("%s: the winner %s has a conflict", k, s.Winner)
			}
			byName, byNum := map[string]bool{}, map[string]bool{}
			for _, p := range s.Ports {
				num := string(p.Protocol) + "/" + strconv.Itoa(int(p.Port))
				if byNum[num] || p.Name != "" && byName[p.Name] {
					t.Fatalf("%s: merged ports not unique: %+v", k, s.Ports)
				}
				byNum[num], byName[p.Name] = true, true
			}
		}
	})
}
