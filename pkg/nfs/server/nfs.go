package server

import (
	"context"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// nfsProcs are the procedures of NFS version 3 (RFC 1813 section 3.3)
// but NULL, indexed by procedure number.
var nfsProcs = [nfs3.NumProcs]procFunc{
	nfs3.ProcGetattr: (*call).getattr, nfs3.ProcSetattr: (*call).setattr,
	nfs3.ProcLookup: (*call).lookup, nfs3.ProcAccess: (*call).access,
	nfs3.ProcReadlink: (*call).readlink, nfs3.ProcRead: (*call).read,
	nfs3.ProcWrite: (*call).write, nfs3.ProcCreate: (*call).create,
	nfs3.ProcMkdir: (*call).mkdir, nfs3.ProcSymlink: (*call).symlink,
	nfs3.ProcMknod: (*call).mknod, nfs3.ProcRemove: (*call).remove,
	nfs3.ProcRmdir: (*call).rmdir, nfs3.ProcRename: (*call).rename,
	nfs3.ProcLink: (*call).link, nfs3.ProcReaddir: (*call).readdir,
	nfs3.ProcReaddirplus: (*call).readdirplus, nfs3.ProcFsstat: (*call).fsstat,
	nfs3.ProcFsinfo: (*call).fsinfo, nfs3.ProcPathconf: (*call).pathconf,
	nfs3.ProcCommit: (*call).commit,
}

// nfsHandlersWith returns the 22 procedures of NFS version 3 (RFC 1813
// section 3.3), indexed by procedure number, the non-idempotent ones
// behind duplicate request cache drc (drc.go; nil: none).
func (s *Server) nfsHandlersWith(drc *replyCache) []sunrpc.Handler {
	p := make([]sunrpc.Handler, nfs3.NumProcs)
	p[nfs3.ProcNull] = func(_ context.Context, _ *sunrpc.Request, _ *sunrpc.Builder) error { return nil }
	for proc, f := range nfsProcs {
		if f != nil {
			p[proc] = drc.wrap(uint32(proc), s.wrap(f))
		}
	}
	return p
}
