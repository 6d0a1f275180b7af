// Package perftest measures the verbs layer the way the perftest suite
// (ib_write_bw, ib_read_bw, ib_send_bw, ib_send_lat) measures an RDMA NIC:
// a server that exposes a registered buffer, a client that moves data to or
// from it with RDMA Write, RDMA Read or Send, and a report of bandwidth
// (MiB/s), message rate (messages/s) or latency (µs).
//
// The client hands the server its parameters and learns the server's buffer
// (tagged offset, rkey) through the connection's private data: there is no
// second socket. The transport is the software iWARP provider (pkg/verbs/siw).
//
// Every run can be set beside a baseline measured in the same process: the
// same byte movement over a raw TCP loopback socket (one stream copy for the
// bandwidth tests, a ping-pong of the same size for the latency test), given
// as a ratio RDMA/TCP.
package perftest
