package server

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// ServeRDMA serves NFS v3 over RPC-over-RDMA (RFC 8166 and the version 2
// draft, with the RFC 8267 binding) on the listener l (rpcrdma.Listen,
// opened by package exportd for driver server) until ctx ends, then
// closes l and returns nil; or the listener's error. MOUNT stays on TCP
// (RFC 8267 section 5.1), served by Serve. l's options set the credits
// per connection and the receive budget; SetMachineGrants (set by the
// volume registry), the grants per machine name. Give l the server's
// Logger to have the transport log where the server does.
func (s *Server) ServeRDMA(ctx context.Context, l *rpcrdma.Server) error {
	defer l.Close()
	s.setRDMA(l)
	klog.InfoS("nfs server: serving NFS over RDMA", "addr", l.Addr())
	err := l.Serve(ctx, s.rpc)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// RDMAMetrics returns the RPC-over-RDMA counters of the latest ServeRDMA
// listener (connections, calls, credits granted and in use, chunks and
// bytes by kind, RDMA_ERROR replies; see rpcrdma.Metrics); zero before
// ServeRDMA.
func (s *Server) RDMAMetrics() rpcrdma.Metrics {
	s.rdmaMu.Lock()
	defer s.rdmaMu.Unlock()
	if s.rdma == nil {
		return rpcrdma.Metrics{}
	}
	return s.rdma.Metrics()
}
