package server

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// statusOf maps an error to nfsstat3 (RFC 1813 section 2.6), as knfsd's
// nfserrno does; unknown errors are NFS3ERR_IO.
func statusOf(err error) nfs3.Status {
	if err == nil {
		return nfs3.OK
	}
	var st nfs3.Status
	if errors.As(err, &st) {
		return st
	}
	var en unix.Errno
	if !errors.As(err, &en) {
		return nfs3.ErrIO
	}
	switch en {
	case unix.EPERM:
		return nfs3.ErrPerm
	case unix.ENOENT:
		return nfs3.ErrNoEnt
	case unix.ENXIO:
		return nfs3.ErrNXIO
	case unix.EACCES:
		return nfs3.ErrAccess
	case unix.EEXIST:
		return nfs3.ErrExist
	case unix.EXDEV:
		return nfs3.ErrXDev
	case unix.ENODEV:
		return nfs3.ErrNoDev
	case unix.ENOTDIR:
		return nfs3.ErrNotDir
	case unix.EISDIR:
		return nfs3.ErrIsDir
	case unix.EINVAL, unix.ELOOP:
		return nfs3.ErrInval
	case unix.EFBIG:
		return nfs3.ErrFBig
	case unix.ENOSPC:
		return nfs3.ErrNoSpc
	case unix.EROFS:
		return nfs3.ErrROFS
	case unix.EMLINK:
		return nfs3.ErrMLink
	case unix.ENAMETOOLONG:
		return nfs3.ErrNameTooLong
	case unix.ENOTEMPTY:
		return nfs3.ErrNotEmpty
	case unix.EDQUOT:
		return nfs3.ErrDQuot
	case unix.ESTALE:
		return nfs3.ErrStale
	case unix.EOPNOTSUPP:
		return nfs3.ErrNotSupp
	case unix.EAGAIN, unix.ENOMEM, unix.ETIMEDOUT:
		return nfs3.ErrJukebox
	case unix.E2BIG, unix.ERANGE:
		return nfs3.ErrTooSmall
	}
	return nfs3.ErrIO
}

// checkName validates a filename3 for a procedure that creates or
// removes an entry: empty or containing '/' or NUL -> NFS3ERR_ACCES,
// over 255 bytes -> NFS3ERR_NAMETOOLONG, "." or ".." -> dot (the caller's
// choice of status).
func checkName(name string, dot nfs3.Status) nfs3.Status {
	switch {
	case len(name) > nfs3.MaxNameLen:
		return nfs3.ErrNameTooLong
	case name == "":
		return nfs3.ErrAccess
	case name == "." || name == "..":
		return dot
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return nfs3.ErrAccess
		}
	}
	return nfs3.OK
}
