package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// toErrno maps an error of the NFS client to the errno of the FUSE reply:
// the nfs3.Status' Errno (ENOENT, EACCES, ESTALE, ...), EINTR when the
// request was interrupted, EIO otherwise: a soft mount that gave up, or a
// transport error such as ECONNREFUSED, is EIO as with Linux's "soft"
// (without "softerr").
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var st nfs3.Status
	if errors.As(err, &st) {
		return st.Errno()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, sunrpc.ErrTimeout):
		return syscall.EIO
	}
	return syscall.EIO
}

// call starts a FUSE request on n and returns the context of its NFS
// calls (fsys.call: the caller's credential, not interrupted); op.done
// must be called when the request ends, with *errno holding its answer.
// Every request on a node (and on its open files) goes through here, so
// that a stale file handle is handled in one place, whichever call found
// it: when the answer is ESTALE (the server said NFS3ERR_STALE or
// NFS3ERR_BADHANDLE: the file was removed, by another client too), n
// forgets its cached attributes and where the kernel was told of it
// (stale).
func (n *node) call(ctx context.Context, errno *syscall.Errno) (context.Context, nodeOp) {
	c, op := n.sys.call(ctx)
	return c, nodeOp{op: op, n: n, errno: errno}
}

// nodeOp is one FUSE request on a node in progress (node.call); a value,
// so that starting one allocates no closure.
type nodeOp struct {
	op    fuseOp
	n     *node
	errno *syscall.Errno
}

// done ends the request: its NFS context is cancelled, and n is marked
// stale when the answer is ESTALE.
func (o nodeOp) done() {
	o.op.done()
	if *o.errno == syscall.ESTALE {
		o.n.stale()
	}
}

// stale forgets n's cached attributes and where the kernel was told of
// it, so that the kernel's retry of a path walk after ESTALE (Linux
// retries once with LOOKUP_REVAL: stat, open, chmod, truncate and the
// like) reaches the server with a LOOKUP instead of finding n again
// (knownChild), and answers ENOENT for a file that is gone, as Linux NFS
// marks such an inode stale. An operation on an open file of n answers
// ESTALE, as on Linux NFS.
func (n *node) stale() {
	n.mu.Lock()
	n.ac.valid = false
	n.seen = entry{}
	n.mu.Unlock()
}
