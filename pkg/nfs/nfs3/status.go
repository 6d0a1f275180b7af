package nfs3

import (
	"strconv"
	"syscall"
)

// Status is nfsstat3 (RFC 1813 section 2.6), a 4-byte enum that leads every
// result. It implements error, so a non-OK status can be returned, wrapped
// with %w, and matched with errors.Is(err, nfs3.ErrNoEnt). OK is a Status
// too: use Err to turn a status into a nil-or-error value.
type Status uint32

// nfsstat3 values (RFC 1813 section 2.6).
const (
	OK             Status = 0     // NFS3_OK
	ErrPerm        Status = 1     // NFS3ERR_PERM: not owner
	ErrNoEnt       Status = 2     // NFS3ERR_NOENT: no such file or directory
	ErrIO          Status = 5     // NFS3ERR_IO: I/O error
	ErrNXIO        Status = 6     // NFS3ERR_NXIO: no such device or address
	ErrAccess      Status = 13    // NFS3ERR_ACCES: permission denied
	ErrExist       Status = 17    // NFS3ERR_EXIST: file exists
	ErrXDev        Status = 18    // NFS3ERR_XDEV: cross-device hard link
	ErrNoDev       Status = 19    // NFS3ERR_NODEV: no such device
	ErrNotDir      Status = 20    // NFS3ERR_NOTDIR: not a directory
	ErrIsDir       Status = 21    // NFS3ERR_ISDIR: is a directory
	ErrInval       Status = 22    // NFS3ERR_INVAL: invalid argument
	ErrFBig        Status = 27    // NFS3ERR_FBIG: file too large
	ErrNoSpc       Status = 28    // NFS3ERR_NOSPC: no space left on device
	ErrROFS        Status = 30    // NFS3ERR_ROFS: read-only file system
	ErrMLink       Status = 31    // NFS3ERR_MLINK: too many hard links
	ErrNameTooLong Status = 63    // NFS3ERR_NAMETOOLONG: filename too long
	ErrNotEmpty    Status = 66    // NFS3ERR_NOTEMPTY: directory not empty
	ErrDQuot       Status = 69    // NFS3ERR_DQUOT: quota exceeded
	ErrStale       Status = 70    // NFS3ERR_STALE: stale file handle
	ErrRemote      Status = 71    // NFS3ERR_REMOTE: too many levels of remote in path
	ErrBadHandle   Status = 10001 // NFS3ERR_BADHANDLE: illegal file handle
	ErrNotSync     Status = 10002 // NFS3ERR_NOT_SYNC: SETATTR guard mismatch
	ErrBadCookie   Status = 10003 // NFS3ERR_BAD_COOKIE: READDIR cookie is stale
	ErrNotSupp     Status = 10004 // NFS3ERR_NOTSUPP: operation not supported
	ErrTooSmall    Status = 10005 // NFS3ERR_TOOSMALL: buffer or request too small
	ErrServerFault Status = 10006 // NFS3ERR_SERVERFAULT: server error with no NFS mapping
	ErrBadType     Status = 10007 // NFS3ERR_BADTYPE: object type not supported
	ErrJukebox     Status = 10008 // NFS3ERR_JUKEBOX: try again later
)

// Linux kernel-internal errno values (include/linux/errno.h) that the Linux
// NFS client uses for NFSv3-only conditions. They are not valid user-space
// errnos; KernelErrno returns them, Errno does not.
const (
	EBADHANDLE   syscall.Errno = 521
	ENOTSYNC     syscall.Errno = 522
	EBADCOOKIE   syscall.Errno = 523
	ENOTSUPP     syscall.Errno = 524
	ETOOSMALL    syscall.Errno = 525
	ESERVERFAULT syscall.Errno = 526
	EBADTYPE     syscall.Errno = 527
	EJUKEBOX     syscall.Errno = 528
)

type statusInfo struct {
	name   string
	errno  syscall.Errno // user-space errno
	kernel syscall.Errno // Linux nfs_stat_to_errno
}

func (s Status) info() (statusInfo, bool) {
	switch s {
	case OK:
		return statusInfo{"NFS3_OK", 0, 0}, true
	case ErrPerm:
		return statusInfo{"NFS3ERR_PERM", syscall.EPERM, syscall.EPERM}, true
	case ErrNoEnt:
		return statusInfo{"NFS3ERR_NOENT", syscall.ENOENT, syscall.ENOENT}, true
	case ErrIO:
		return statusInfo{"NFS3ERR_IO", syscall.EIO, syscall.EIO}, true
	case ErrNXIO:
		return statusInfo{"NFS3ERR_NXIO", syscall.ENXIO, syscall.ENXIO}, true
	case ErrAccess:
		return statusInfo{"NFS3ERR_ACCES", syscall.EACCES, syscall.EACCES}, true
	case ErrExist:
		return statusInfo{"NFS3ERR_EXIST", syscall.EEXIST, syscall.EEXIST}, true
	case ErrXDev:
		return statusInfo{"NFS3ERR_XDEV", syscall.EXDEV, syscall.EXDEV}, true
	case ErrNoDev:
		return statusInfo{"NFS3ERR_NODEV", syscall.ENODEV, syscall.ENODEV}, true
	case ErrNotDir:
		return statusInfo{"NFS3ERR_NOTDIR", syscall.ENOTDIR, syscall.ENOTDIR}, true
	case ErrIsDir:
		return statusInfo{"NFS3ERR_ISDIR", syscall.EISDIR, syscall.EISDIR}, true
	case ErrInval:
		return statusInfo{"NFS3ERR_INVAL", syscall.EINVAL, syscall.EINVAL}, true
	case ErrFBig:
		return statusInfo{"NFS3ERR_FBIG", syscall.EFBIG, syscall.EFBIG}, true
	case ErrNoSpc:
		return statusInfo{"NFS3ERR_NOSPC", syscall.ENOSPC, syscall.ENOSPC}, true
	case ErrROFS:
		return statusInfo{"NFS3ERR_ROFS", syscall.EROFS, syscall.EROFS}, true
	case ErrMLink:
		return statusInfo{"NFS3ERR_MLINK", syscall.EMLINK, syscall.EMLINK}, true
	case ErrNameTooLong:
		return statusInfo{"NFS3ERR_NAMETOOLONG", syscall.ENAMETOOLONG, syscall.ENAMETOOLONG}, true
	case ErrNotEmpty:
		return statusInfo{"NFS3ERR_NOTEMPTY", syscall.ENOTEMPTY, syscall.ENOTEMPTY}, true
	case ErrDQuot:
		return statusInfo{"NFS3ERR_DQUOT", syscall.EDQUOT, syscall.EDQUOT}, true
	case ErrStale:
		return statusInfo{"NFS3ERR_STALE", syscall.ESTALE, syscall.ESTALE}, true
	case ErrRemote:
		return statusInfo{"NFS3ERR_REMOTE", syscall.EREMOTE, syscall.EREMOTE}, true
	case ErrBadHandle:
		// The handle is unusable: for the caller that is a stale handle.
		return statusInfo{"NFS3ERR_BADHANDLE", syscall.ESTALE, EBADHANDLE}, true
	case ErrNotSync:
		return statusInfo{"NFS3ERR_NOT_SYNC", syscall.EIO, ENOTSYNC}, true
	case ErrBadCookie:
		// getdents(2) at a position that is no longer valid.
		return statusInfo{"NFS3ERR_BAD_COOKIE", syscall.EINVAL, EBADCOOKIE}, true
	case ErrNotSupp:
		return statusInfo{"NFS3ERR_NOTSUPP", syscall.EOPNOTSUPP, ENOTSUPP}, true
	case ErrTooSmall:
		// getdents(2): "result buffer is too small".
		return statusInfo{"NFS3ERR_TOOSMALL", syscall.EINVAL, ETOOSMALL}, true
	case ErrServerFault:
		return statusInfo{"NFS3ERR_SERVERFAULT", syscall.EREMOTEIO, syscall.EREMOTEIO}, true
	case ErrBadType:
		// mknod(2) of a type the file system does not support.
		return statusInfo{"NFS3ERR_BADTYPE", syscall.EINVAL, EBADTYPE}, true
	case ErrJukebox:
		return statusInfo{"NFS3ERR_JUKEBOX", syscall.EAGAIN, EJUKEBOX}, true
	}
	return statusInfo{}, false
}

// String returns the RFC 1813 name ("NFS3ERR_NOENT"), or "NFS3ERR(n)" for a
// value RFC 1813 does not define.
func (s Status) String() string {
	if i, ok := s.info(); ok {
		return i.name
	}
	return "NFS3ERR(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Error returns the status name and the text of its errno.
func (s Status) Error() string {
	if s == OK {
		return "NFS3_OK"
	}
	return s.String() + ": " + s.Errno().Error()
}

// Err returns nil for OK and s otherwise.
func (s Status) Err() error {
	if s == OK {
		return nil
	}
	return s
}

// Errno returns the user-space errno for s, suitable as a FUSE reply or a
// syscall error: 0 for OK, the errno of the same name for the statuses that
// are errnos in RFC 1813, and for the NFSv3-only ones: BADHANDLE -> ESTALE,
// NOT_SYNC -> EIO, BAD_COOKIE -> EINVAL, NOTSUPP -> EOPNOTSUPP (ENOTSUP),
// TOOSMALL -> EINVAL, SERVERFAULT -> EREMOTEIO (as Linux), BADTYPE -> EINVAL,
// JUKEBOX -> EAGAIN (the request should be retried after a delay; see
// Temporary). Unknown values map to EIO, as in Linux.
func (s Status) Errno() syscall.Errno {
	if i, ok := s.info(); ok {
		return i.errno
	}
	return syscall.EIO
}

// KernelErrno returns what Linux nfs_stat_to_errno (fs/nfs_common) returns
// for s, negated back to positive: the same as Errno except that BADHANDLE,
// NOT_SYNC, BAD_COOKIE, NOTSUPP, TOOSMALL, BADTYPE and JUKEBOX map to the
// kernel-internal values EBADHANDLE ... EJUKEBOX (521..528).
func (s Status) KernelErrno() syscall.Errno {
	if i, ok := s.info(); ok {
		return i.kernel
	}
	return syscall.EIO
}

// Temporary reports whether the request may succeed if retried unchanged
// after a delay: true only for NFS3ERR_JUKEBOX (RFC 1813 section 2.6).
func (s Status) Temporary() bool { return s == ErrJukebox }

// Is reports whether s matches target: a syscall.Errno equal to s.Errno(),
// or one of the io/fs errors that s.Errno() matches (fs.ErrNotExist for
// NOENT; fs.ErrExist for EXIST and NOTEMPTY; fs.ErrPermission for PERM and
// ACCES; errors.ErrUnsupported for NOTSUPP). Equality between two Status
// values is handled by errors.Is itself.
func (s Status) Is(target error) bool {
	if s == OK {
		return false
	}
	e := s.Errno()
	if t, ok := target.(syscall.Errno); ok {
		return t == e
	}
	return e.Is(target)
}
