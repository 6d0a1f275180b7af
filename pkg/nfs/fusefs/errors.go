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
