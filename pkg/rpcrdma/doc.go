// Package rpcrdma implements the wire codec and the pure decision logic of
// RPC-over-RDMA version 1 (RFC 8166), the transport that carries ONC RPC
// (RFC 5531) and so NFSv3 (RFC 1813, bound by RFC 8267) over RDMA.
//
// The codec and planners hold no connection state and perform no I/O:
//
//   - header.go: the transport header (RFC 8166 section 4): Header, Segment,
//     ReadSegment, Header.Encode, Header.Decode with Limits.
//   - errreply.go: the RDMA_ERROR a responder sends for a header it could
//     not decode (RFC 8166 section 4.5).
//   - privdata.go: the RDMA-CM private data of RFC 8797 (magic 0xf6ab0e18)
//     and the negotiation of the inline thresholds.
//   - callplan.go: the requester's choice of chunks for a call and its reply
//     (modelled on Linux xprtrdma rpcrdma_marshal_req).
//   - replyplan.go: the responder's choice of how to return a reply within the
//     chunks the requester provided (modelled on Linux svcrdma), and the
//     checks a requester makes on the chunks a reply returns.
//
// The transport, over any verbs.Device (pkg/verbs), uses them:
//
//   - requester.go: Dial returns a Client, a sunrpc.ClientTransport: RFC
//     8797 private data, credit window (RFC 8166 section 3.3.1), pools of
//     pre-registered send and receive buffers (Credits x Inline bytes),
//     per-call registration of Read, Write and Reply chunks, invalidated
//     before RoundTrip returns (or remotely, by Send With Invalidate).
//   - responder.go: Listen returns a Server; Serve dispatches calls to a
//     sunrpc.Dispatcher: receives posted before credits are granted, Read
//     chunks pulled within the negotiated ORD, replies pushed into Write and
//     Reply chunks, RDMA_ERROR for bad headers.
//   - registration.go: memory registration for both roles (buffer pools,
//     the caller's memory per call, slot-owned chunk regions).
//   - grants.go: the responder's credit grants (a budget shared max-min
//     fair among connections, grants per AUTH_SYS machine name).
//   - metrics.go: Metrics (calls, credits, chunks and bytes by kind, RDMA
//     errors, registered memory) and ErrorReply, the RDMA_ERROR a call got.
//
// In the steady state, with the siw provider, a call allocates nothing,
// on the requester or the responder side: per-call state lives in
// per-credit slots, and the chunk memory registered per call reuses the
// provider's region objects (a siw MR is handed out again after Close,
// under a new STag). With the ibverbs provider RegMR allocates, so calls
// that register memory per call (Read and Write chunks) do.
//
// All sizes are in bytes. Decoders never panic, never trust a length or a
// count before checking it against the bytes present and the configured
// Limits, and reuse the caller's slices so that the steady state does not
// allocate.
package rpcrdma
