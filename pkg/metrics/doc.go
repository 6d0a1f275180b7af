// Package metrics holds the Prometheus metrics of the driver's processes:
// the HTTP endpoint (Serve, ServeUnix), the export server's RPC metrics
// (RPCServer, a sunrpc.Observer), RPC-over-RDMA transport counters
// (TransportCollector), the NFS client's counters of a mount
// (ClientCollector), the export server's volumes (VolumeCollector), the
// CSI gRPC calls (CSI) and transport choices (DeviceCollector), and the
// node's view of its per-pod mount processes (MountCollector).
//
// Collectors read snapshots of types this package owns (TransportStats,
// Connection, DRCStats, MountMemory, DeviceCount) through functions
// called at scrape time, so that it imports none of the packages that
// count (rpcrdma, the export server, fusefs, devselect); the binary wires
// them (internal/metricsource).
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
