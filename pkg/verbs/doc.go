// Package verbs is the RDMA verbs model shared by every provider: devices,
// protection domains, memory regions, completion queues, reliable-connected
// queue pairs, work requests and completions, and the connection manager.
//
// The model follows the InfiniBand/iWARP verbs as exposed by libibverbs and
// the RDMA connection manager, in Go terms:
//
//   - A memory region (MR) registers caller-owned memory ([]byte) under an
//     STag. For this model the local key (lkey) and remote key (rkey) of a
//     region are the same 32-bit STag: a 24-bit index and an 8-bit consumer
//     key that rotates each time the region is re-validated (RFC 5040
//     section 2.2 "STag"). Addresses are 64-bit tagged offsets: Addr() is the
//     tagged offset of the region's first byte. RegFileMR registers a
//     shared mapping of a file range (the page cache) the same way.
//   - Work requests are posted to a queue pair's send queue (Send, Send with
//     Invalidate, RDMA Write, RDMA Read, local invalidate) or receive queue,
//     and finish with a work completion (WC) on the queue's completion queue.
//     Send-queue completions appear in the order the requests were posted.
//   - A queue pair is connected by Device.Connect (active side) or by
//     accepting a ConnRequest from a Listener (passive side), exchanging up to
//     MaxPrivateData bytes of private data and negotiating IRD/ORD, the
//     number of inbound/outbound RDMA Reads that may be outstanding.
//   - A connection that ends for any reason (the peer disconnects, a
//     protocol error, a Terminate message) moves the queue pair to the error
//     state: outstanding work requests complete with WCFlushErr, Done() is
//     closed and Err() says why.
//
// Providers: pkg/verbs/siw (software iWARP over TCP, pure Go, the default)
// and pkg/verbs/ibverbs (build tag ibverbs, cgo: RDMA NICs through
// rdma-core's libibverbs and librdmacm).
package verbs
