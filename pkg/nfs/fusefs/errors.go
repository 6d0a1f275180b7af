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

// fail maps err as toErrno does; when the server says n's file handle is
// stale (NFS3ERR_STALE, NFS3ERR_BADHANDLE: the file was removed, by
// another client too), it also forgets n's cached attributes and where the
// kernel was told of it, so that the kernel's retry of the path walk
// (LOOKUP_REVAL after ESTALE) reaches the server with a LOOKUP instead of
// finding n again (knownChild), as Linux NFS marks such an inode stale.
func (n *node) fail(err error) syscall.Errno {
	errno := toErrno(err)
	if errno == syscall.ESTALE {
		n.mu.Lock()
		n.ac.valid = false
		n.seen = entry{}
		n.mu.Unlock()
	}
	return errno
}
