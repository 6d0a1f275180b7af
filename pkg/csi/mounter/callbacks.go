package mounter

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
)

// The node's lock callback service: one NLM (GRANTED, GRANTED_MSG) and
// NSM (SM_NOTIFY) service for every mount of the node, registered with
// the node's rpcbind, passing each callback to the mount process whose
// lock it is (package lockcb), and the node's status monitor for the
// node's own lock managers (package statmon). The mount processes attach
// to it at Server.LockSocket (their --node-lock-socket).

// runCallbacks runs the node's callback service until ctx ends; ready is
// closed once it listens, or failed to. While it does not run, mount
// processes are started without it (each serves its own callbacks).
func (s *Server) runCallbacks(ctx context.Context, ready chan<- struct{}) {
	cb := &lockcb.Service{Socket: s.LockSocket, RPCBind: s.RPCBind}
	ran, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-cb.Ready():
			s.mu.Lock()
			s.callbacks = cb
			s.mu.Unlock()
		case <-ran:
		case <-ctx.Done():
		}
		close(ready)
	}()
	err := cb.Run(ctx)
	close(ran)
	<-watched
	s.mu.Lock()
	s.callbacks = nil
	s.mu.Unlock()
	if err != nil {
		klog.ErrorS(err, "mounter: lock callback service stopped: mounts complete blocked locks by re-sending them")
	}
}

// CallbackCounts returns the lock callbacks the node's service received,
// by procedure and outcome (nil without a service).
func (s *Server) CallbackCounts() []metrics.NLMCallbackCount {
	s.mu.Lock()
	cb := s.callbacks
	s.mu.Unlock()
	if cb == nil {
		return nil
	}
	var out []metrics.NLMCallbackCount
	for _, c := range cb.Counts() {
		out = append(out, metrics.NLMCallbackCount{Proc: c.Proc, Result: c.Result, N: c.N})
	}
	return out
}

// CallbackPort returns the TCP port of the node's lock callback service
// (0 when it does not run).
func (s *Server) CallbackPort() int {
	s.mu.Lock()
	cb := s.callbacks
	s.mu.Unlock()
	if cb == nil {
		return 0
	}
	return cb.Port()
}
