// Package counters holds the Prometheus collectors of the counters the
// RPC-over-RDMA transport, the export server and RDMA device choice keep:
// endpoints and connections (rpcrdma.Metrics, rpcrdma.ConnInfo), the
// export server's duplicate request cache, READ mappings and open-file
// cache (server.DRCStats, server.ReadMapStats, server.FileCacheStats), and
// device choices
// (devselect.Count). A FUSE mount's counters are package fusecounters'.
//
// Each collector reads the counting package's own snapshot type through
// a function called at scrape time: a counter added there is one line
// here. The package sits above the packages that count and beside
// package metrics (whose Namespace it uses), apart from it so that the
// CSI plugin, which imports package metrics, reaches none of the data
// path. Its tests, with real endpoints, are package metrics' external
// tests.
package counters
