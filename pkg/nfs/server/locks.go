package server

import (
	"context"
	"errors"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// lockKey is the lock manager's FileKey: the kernel file handle inside a
// verified NFS handle, so that every export's handle of one file names
// the same locks. NLM4_STALE_FH for a handle that does not verify or
// whose export is gone, NLM4_FAILED for a client the export does not
// allow (as Linux nfsd's nlm_fopen maps errors other than staleness).
func (s *Server) lockKey(fh []byte, req *sunrpc.Request) (string, nlm.Stat) {
	id, kh, err := s.seal.parseHandle(fh)
	if err != nil {
		return "", nlm.StaleFH
	}
	ex := s.exports.Load().byID[id]
	if ex == nil {
		return "", nlm.StaleFH
	}
	if ok, _ := ex.accessBy(callerOf(req), s.nameOnly); !ok {
		s.refuse(req, "NLM", nlm.ProcName(req.Proc), ex)
		return "", nlm.Failed
	}
	return strconv.Itoa(int(kh.Type())) + ":" + string(kh.Bytes()), nlm.Granted
}

// RegisterRPCBind registers each mapping with the rpcbind (portmap v2) at
// addr and returns a function that removes the mappings it made. A
// mapping rpcbind refuses (the program and version are registered
// already, by another server of this host or a previous instance that
// did not exit cleanly: `rpcinfo -d PROG VERS` removes it) is left alone
// and reported in the error, after the others were tried.
func RegisterRPCBind(ctx context.Context, addr string, maps []sunrpc.Mapping) (unregister func(context.Context), err error) {
	var done []sunrpc.Mapping
	var errs []error
	for _, m := range maps {
		if err := sunrpc.PortmapSet(ctx, addr, m); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, m)
		klog.V(2).InfoS("nfs server: registered with rpcbind", "prog", m.Prog, "vers", m.Vers, "port", m.Port)
	}
	return func(ctx context.Context) {
		for _, m := range done {
			if err := sunrpc.PortmapUnset(ctx, addr, m); err != nil {
				klog.InfoS("nfs server: rpcbind unregistration failed", "prog", m.Prog, "vers", m.Vers, "err", err)
			}
		}
	}, errors.Join(errs...)
}
