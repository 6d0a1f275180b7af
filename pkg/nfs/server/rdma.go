package server

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// ServeRDMA serves NFS v3 over RPC-over-RDMA version 1 (RFC 8166, with the
// RFC 8267 binding) on addr ("host:port") through dev until ctx ends, then
// returns nil; or the listener's error. MOUNT stays on TCP (RFC 8267 section
// 5.1), served by Serve. opts sets the credits per connection and the
// receive budget; SetMachineGrants (set by the volume registry), the
// grants per machine name. The transport logs to opts.Logger, or when nil
// to the server's Logger.
func (s *Server) ServeRDMA(ctx context.Context, dev verbs.Device, addr string, opts rpcrdma.ServerOptions) error {
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	l, err := rpcrdma.Listen(ctx, dev, addr, opts)
	if err != nil {
		return fmt.Errorf("nfs server: NFS/RDMA on %s: %w", addr, err)
	}
	defer l.Close()
	s.setRDMA(l)
	klog.InfoS("nfs server: serving NFS over RDMA", "addr", l.Addr(), "device", dev.Name(), "transport", dev.Transport())
	err = l.Serve(ctx, s.rpc)
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
