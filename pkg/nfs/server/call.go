package server

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// call is the state of one NFS call.
type call struct {
	ctx context.Context
	s   *Server
	req *sunrpc.Request
	id  identity
}

type procFunc func(c *call, d *xdr.Decoder, b *sunrpc.Builder) error

var callPool = sync.Pool{New: func() any { return new(call) }}

// wrap makes a procedure a sunrpc.Handler; at klog verbosity 5 each call
// is logged with its peer and transport.
func (s *Server) wrap(f procFunc) sunrpc.Handler {
	return func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		if v := klog.V(5); v.Enabled() {
			v.InfoS("nfs call", "proc", nfs3.ProcName(req.Proc), "xid", req.XID, "peer", req.Peer, "transport", req.Transport)
		}
		c := callPool.Get().(*call)
		*c = call{ctx: ctx, s: s, req: req}
		err := f(c, req.ArgsDecoder(), b)
		*c = call{}
		callPool.Put(c)
		return err
	}
}

// obj is an object opened from a file handle: an O_PATH descriptor, or
// (file) a new regular file's descriptor open for writing.
type obj struct {
	fd     int
	file   bool // fd is open for writing, not O_PATH
	ex     *export
	kh     unix.FileHandle
	rootFD int
	st     unix.Stat_t // as of open (pre-operation)
	post   unix.Stat_t // after the operation, when posted (chargeDir)
	posted bool
	ro     bool // the caller may not modify (read-only export or client)
}

// done ends a modifying operation on o: its wcc_data (RFC 1813 section
// 2.6; empty when o never opened), then o is closed.
func (o *obj) done() nfs3.WccData {
	if o.fd < 0 {
		return nfs3.WccData{}
	}
	w := o.wcc()
	o.close()
	return w
}

func (o *obj) close() {
	if o.fd >= 0 {
		unix.Close(o.fd)
		o.fd = -1
	}
}

func (o *obj) isDir() bool { return o.st.Mode&unix.S_IFMT == unix.S_IFDIR }

// isExportRoot reports whether o is its export's root directory.
func (o *obj) isExportRoot() bool { return o.st.Dev == o.ex.dev && o.st.Ino == o.ex.ino }

// open resolves fh: NFS3ERR_BADHANDLE for a malformed handle or unknown
// export, NFS3ERR_ACCES for a client outside the export's list (checked
// at every call, so a Revoke applies to the next one), NFS3ERR_STALE when
// the object is gone. It sets the caller's identity and o.ro.
func (c *call) open(fh *nfs3.FH) (obj, nfs3.Status) {
	o := obj{fd: -1}
	id, kh, err := c.s.seal.parseHandle(fh.Bytes())
	if err != nil {
		return o, nfs3.ErrBadHandle
	}
	ex := c.s.exports.Load().byID[id]
	if ex == nil {
		return o, nfs3.ErrBadHandle
	}
	allowed, ro := ex.accessBy(callerOf(c.req), c.s.nameOnly)
	if !allowed {
		c.s.refuse(c.req, "NFS", nfs3.ProcName(c.req.Proc), ex)
		return o, nfs3.ErrAccess
	}
	c.setIdentity(ex)
	fd, err := unix.OpenByHandleAt(c.s.rootFD, kh, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	if err != nil {
		switch {
		case errors.Is(err, unix.ESTALE), errors.Is(err, unix.ENOENT):
			return o, nfs3.ErrStale
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOVERFLOW), errors.Is(err, unix.EBADF):
			return o, nfs3.ErrBadHandle
		}
		return o, statusOf(err)
	}
	o.fd, o.ex, o.kh, o.rootFD, o.ro = fd, ex, kh, c.s.rootFD, ro
	if err := unix.Fstat(fd, &o.st); err != nil {
		o.close()
		return o, statusOf(err)
	}
	return o, nfs3.OK
}

// reopen opens o's object again from its handle with flags (O_RDONLY,
// O_WRONLY ...), never following a symlink (ELOOP for one).
func (o *obj) reopen(flags int) (int, error) {
	return unix.OpenByHandleAt(o.rootFD, o.kh, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW)
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
