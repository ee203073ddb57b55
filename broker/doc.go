// Package broker distributes the clusterset catalog between clusters: every
// cluster's agent publishes what its cluster offers (exports and gateways)
// and watches what every other cluster offers.
//
// A broker is a stateless server in front of a Store (store.go): the
// embedded bbolt store for one broker, or etcd for several brokers sharing
// one consistent store. Agents connect over mutual TLS 1.3 with their
// fabric identity; the certificate's cluster ID is the only cluster a
// connection may write. The catalog is a set of entries with one global
// revision; a watching client gets a full snapshot once and then deltas in
// revision order, and a reconnecting client resumes from the last revision
// it saw (a snapshot again only if the store compacted that history).
//
// The wire protocol (wire.go) is length-prefixed JSON frames with a hard
// size bound; a malformed or oversized frame, a write to another cluster's
// entries, or a stale base revision is answered with an error frame naming
// the problem and that one connection is closed.
package broker
