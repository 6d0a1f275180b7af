// Package metrics holds the Prometheus metrics of the driver's processes:
// the HTTP endpoint (Serve, ServeUnix), the export server's RPC metrics
// (RPCServer, a sunrpc.Observer), the NFS client's counters of a mount
// (ClientCollector), the export server's volumes (VolumeCollector), the
// CSI gRPC calls (CSI), and the node's view of its per-pod mount
// processes (MountCollector).
//
// The collectors of the data path's counters (RPC-over-RDMA transport and
// connections, the export server's duplicate request cache and READ
// mappings, a FUSE mount's memory and transport, RDMA device choices) are
// in package counters below this one's directory: they read the counting
// packages' own snapshot types, and this package imports none of those
// packages, so that the CSI plugin, which uses it, reaches none of the
// data path.
//
// Every metric is named nfsrdma_..., in base units (seconds, bytes),
// counters ending in _total (https://prometheus.io/docs/practices/naming/).
//
// Per-pod metrics on a node: each `driver mount` process serves its own
// registry (ClientCollector and TransportCollector with volume and pod
// const labels, and an RPCClient) on a unix socket (ServeUnix); the node
// plugin's MountCollector fetches every mount's metrics at scrape time,
// each bounded by a timeout, and re-exposes them on the node's endpoint.
package metrics

// Namespace prefixes every metric name.
const Namespace = "nfsrdma"
