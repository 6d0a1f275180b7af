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
	shared bool // fd is the open-file cache's (openIO): close leaves it open
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
		if !o.shared {
			unix.Close(o.fd)
		}
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
	ex, kh, ro, st := c.resolve(fh)
	if st != nfs3.OK {
		return obj{fd: -1}, st
	}
	return c.openResolved(ex, kh, ro)
}

// resolve checks fh (its seal and export) and the caller's access to the
// export, and sets the caller's identity: the export, the kernel file
// handle, whether the caller may not modify, or the error status
// (NFS3ERR_BADHANDLE, NFS3ERR_ACCES).
func (c *call) resolve(fh *nfs3.FH) (*export, unix.FileHandle, bool, nfs3.Status) {
	id, kh, err := c.s.seal.parseHandle(fh.Bytes())
	if err != nil {
		return nil, kh, false, nfs3.ErrBadHandle
	}
	ex := c.s.exports.Load().byID[id]
	if ex == nil {
		return nil, kh, false, nfs3.ErrBadHandle
	}
	allowed, ro := ex.accessBy(callerOf(c.req), c.s.nameOnly)
	if !allowed {
		c.s.refuse(c.req, "NFS", nfs3.ProcName(c.req.Proc), ex)
		return nil, kh, false, nfs3.ErrAccess
	}
	c.setIdentity(ex)
	return ex, kh, ro, nfs3.OK
}

// openResolved is open after resolve.
func (c *call) openResolved(ex *export, kh unix.FileHandle, ro bool) (obj, nfs3.Status) {
	o := obj{fd: -1}
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

// openIO is open for READ (acc O_RDONLY) and WRITE (O_WRONLY): when the
// server's open-file cache (filecache.go) has the object's file open with
// acc, o shares that descriptor (o.close leaves it open), o.st is a fresh
// fstat(2) (the permission checks see the file as it is now) and f is the
// cached file, with a reference the caller drops with c.s.files.release;
// otherwise f is nil and o and the status are open's.
func (c *call) openIO(fh *nfs3.FH, acc int) (o obj, f *cachedFile, st nfs3.Status) {
	ex, kh, ro, st := c.resolve(fh)
	if st != nfs3.OK {
		return obj{fd: -1}, nil, st
	}
	if f := c.s.files.get(kh, acc); f != nil {
		o := obj{fd: f.val, shared: true, ex: ex, kh: kh, rootFD: c.s.rootFD, ro: ro}
		if unix.Fstat(f.val, &o.st) == nil && o.st.Nlink > 0 {
			return o, f, nfs3.OK
		}
		// unlinked (or failing): open it again from its handle, which
		// tells a stale handle from a file still linked elsewhere
		c.s.files.drop(f)
		c.s.files.release(f)
	}
	o, st = c.openResolved(ex, kh, ro)
	return o, nil, st
}

// ioFile returns f, the cached file openIO found, or else o's regular
// file opened again from its handle with acc and added to the open-file
// cache; with a reference the caller drops with c.s.files.release.
func (c *call) ioFile(o *obj, f *cachedFile, acc int) (*cachedFile, error) {
	if f != nil {
		return f, nil
	}
	fd, err := o.reopen(acc)
	if err != nil {
		return nil, err
	}
	return c.s.files.add(o.kh, acc, fd, &o.st), nil
}

// reopen opens o's object again from its handle with flags (O_RDONLY,
// O_WRONLY ...), never following a symlink (ELOOP for one).
func (o *obj) reopen(flags int) (int, error) {
	return unix.OpenByHandleAt(o.rootFD, o.kh, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW)
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
