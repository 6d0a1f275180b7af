package mount3

import (
	"strconv"
	"syscall"
)

// Status is mountstat3 (RFC 1813 section 5.1.5), a 4-byte enum. It
// implements error; use Err to turn OK into nil.
type Status uint32

// mountstat3 values.
const (
	OK             Status = 0     // MNT3_OK
	ErrPerm        Status = 1     // MNT3ERR_PERM: not owner
	ErrNoEnt       Status = 2     // MNT3ERR_NOENT: no such file or directory
	ErrIO          Status = 5     // MNT3ERR_IO: I/O error
	ErrAccess      Status = 13    // MNT3ERR_ACCES: permission denied
	ErrNotDir      Status = 20    // MNT3ERR_NOTDIR: not a directory
	ErrInval       Status = 22    // MNT3ERR_INVAL: invalid argument
	ErrNameTooLong Status = 63    // MNT3ERR_NAMETOOLONG: filename too long
	ErrNotSupp     Status = 10004 // MNT3ERR_NOTSUPP: operation not supported
	ErrServerFault Status = 10006 // MNT3ERR_SERVERFAULT: a failure on the server
)

func (s Status) info() (string, syscall.Errno, bool) {
	switch s {
	case OK:
		return "MNT3_OK", 0, true
	case ErrPerm:
		return "MNT3ERR_PERM", syscall.EPERM, true
	case ErrNoEnt:
		return "MNT3ERR_NOENT", syscall.ENOENT, true
	case ErrIO:
		return "MNT3ERR_IO", syscall.EIO, true
	case ErrAccess:
		return "MNT3ERR_ACCES", syscall.EACCES, true
	case ErrNotDir:
		return "MNT3ERR_NOTDIR", syscall.ENOTDIR, true
	case ErrInval:
		return "MNT3ERR_INVAL", syscall.EINVAL, true
	case ErrNameTooLong:
		return "MNT3ERR_NAMETOOLONG", syscall.ENAMETOOLONG, true
	case ErrNotSupp:
		return "MNT3ERR_NOTSUPP", syscall.EOPNOTSUPP, true
	case ErrServerFault:
		return "MNT3ERR_SERVERFAULT", syscall.EREMOTEIO, true
	}
	return "", 0, false
}

// String returns the RFC 1813 name ("MNT3ERR_NOENT"), or "MNT3ERR(n)".
func (s Status) String() string {
	if name, _, ok := s.info(); ok {
		return name
	}
	return "MNT3ERR(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Error returns the status name and the text of its errno.
func (s Status) Error() string {
	if s == OK {
		return "MNT3_OK"
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

// Errno returns the errno of the same name for each mountstat3 value,
// EOPNOTSUPP for NOTSUPP, EREMOTEIO for SERVERFAULT (Linux's mount client
// uses ENOMEM there) and EIO for an unknown value; 0 for OK.
func (s Status) Errno() syscall.Errno {
	if _, e, ok := s.info(); ok {
		return e
	}
	return syscall.EIO
}

// Is reports whether s matches target: a syscall.Errno equal to s.Errno(),
// or an io/fs error that s.Errno() matches (fs.ErrNotExist,
// fs.ErrPermission, errors.ErrUnsupported).
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
