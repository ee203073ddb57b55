// Package k8s is strait's Kubernetes controller (`strait controller`). It
// implements the Multi-Cluster Services API (KEP-1645) on top of strait's
// broker and gateways:
//
//   - every ServiceExport gets the MCS conditions Valid, Ready and Conflict;
//     valid exports are published to the broker;
//   - for every service other clusters export, a ServiceImport (with a
//     clusterset IP allocated once from a configured range and kept in
//     spec.ips for the import's life, the merged ports and status.clusters)
//     and one EndpointSlice per exporting cluster, owned by the import and
//     pointing at this cluster's gateways;
//   - Peers for the clusters the broker knows;
//   - the gateways' configuration — exports with the Service's cluster IP as
//     target, imports, peers, access policies — derived from these objects
//     and pushed live to each gateway's admin socket.
//
// The reconciler is level-triggered over the whole cluster: every watched
// change and every broker update enqueues one key, and one pass recomputes
// everything from the API server's objects and the broker's catalog. MCS
// conflict resolution needs the whole clusterset's view anyway, the object
// counts are those of exported services, and one pass cannot leave two
// half-updated objects disagreeing. A pass writes only what differs, so a
// restart changes nothing that was right, and errors are retried with the
// work queue's exponential backoff, never in a hot loop.
package k8s
