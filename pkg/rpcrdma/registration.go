package rpcrdma

import "github.com/nfsrdma/nfsrdma-csi/pkg/verbs"

// Memory registration for both roles. Each connection registers its send
// and receive buffer pools once; a requester also registers the caller's
// memory for each call that moves DDP-eligible data by chunks (an RDMA Read
// source for a Read chunk, an RDMA Write sink for a Write chunk, RFC 8166
// section 3.4) and keeps slot-owned regions for Position-Zero Read chunks
// and Reply chunks, re-keyed per call; a responder keeps per-slot sinks of
// Read chunks and sources of Reply chunks. Registered bytes are counted in
// the metrics (Metrics.RegisteredBytes).

// register registers b with pd for acc (verbs.PD.RegMR) and counts it in m.
func register(m *metrics, pd verbs.PD, b []byte, acc verbs.Access) (verbs.MR, error) {
	mr, err := pd.RegMR(b, acc)
	if err == nil {
		m.registeredBytes.Add(int64(len(b)))
	}
	return mr, err
}

// deregister closes mr (nil: nothing) and uncounts it in m.
func deregister(m *metrics, mr verbs.MR) {
	if mr != nil {
		m.registeredBytes.Add(-int64(mr.Len()))
		mr.Close()
	}
}
