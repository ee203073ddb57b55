package broker

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Store keys. Everything a cluster writes is under c/<cluster>/, which is
// how the broker enforces that a connection writes only its own cluster:
//
//	c/<cluster>/meta             {} — written by every publish; its ModRev is
//	                             the cluster's base revision (compare-and-swap)
//	c/<cluster>/gw               []Gateway
//	c/<cluster>/e/<ns>/<name>    Export
//	b/<broker>                   brokerInfo, ephemeral: the live brokers
//	assign                       assignment: cluster → broker (RBCM)
const (
	prefixCluster = "c/"
	prefixBroker  = "b/"
	keyAssign     = "assign"
)

func metaKey(cluster string) string { return prefixCluster + cluster + "/meta" }
func gwKey(cluster string) string   { return prefixCluster + cluster + "/gw" }
func exportPrefix(cluster string) string {
	return prefixCluster + cluster + "/e/"
}
func exportKey(cluster, nsName string) string { return exportPrefix(cluster) + nsName }

// keyKind is what a store key holds.
type keyKind int

const (
	kindUnknown keyKind = iota
	kindMeta
	kindGateways
	kindExport
	kindBroker
	kindAssign
)

// parseKey splits a store key into its kind, cluster (or broker ID) and,
// for exports, "ns/name".
func parseKey(k string) (kind keyKind, id, rest string) {
	switch {
	case k == keyAssign:
		return kindAssign, "", ""
	case strings.HasPrefix(k, prefixBroker):
		return kindBroker, k[len(prefixBroker):], ""
	case strings.HasPrefix(k, prefixCluster):
		id, rest, ok := strings.Cut(k[len(prefixCluster):], "/")
		if !ok {
			return kindUnknown, "", ""
		}
		switch {
		case rest == "meta":
			return kindMeta, id, ""
		case rest == "gw":
			return kindGateways, id, ""
		case strings.HasPrefix(rest, "e/"):
			return kindExport, id, rest[2:]
		}
	}
	return kindUnknown, "", ""
}

// brokerInfo is what a live broker publishes about itself.
type brokerInfo struct {
	Addr string `json:"addr"`
}

// assignment is the stored RBCM mapping of clusters to brokers.
type assignment struct {
	// Brokers is the membership the assignment was computed for.
	Brokers []string `json:"brokers"`
	// Clusters maps cluster ID → broker ID.
	Clusters map[string]string `json:"clusters"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("broker: encode %T: %v", v, err)) // plain data always encodes
	}
	return b
}
