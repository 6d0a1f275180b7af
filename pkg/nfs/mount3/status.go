package mount3

import (
	"strconv"
	"syscall"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
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

// name returns the RFC 1813 name of a mountstat3 value, or "" for a
// value RFC 1813 does not define.
func (s Status) name() string {
	switch s {
	case OK:
		return "MNT3_OK"
	case ErrPerm:
		return "MNT3ERR_PERM"
	case ErrNoEnt:
		return "MNT3ERR_NOENT"
	case ErrIO:
		return "MNT3ERR_IO"
	case ErrAccess:
		return "MNT3ERR_ACCES"
	case ErrNotDir:
		return "MNT3ERR_NOTDIR"
	case ErrInval:
		return "MNT3ERR_INVAL"
	case ErrNameTooLong:
		return "MNT3ERR_NAMETOOLONG"
	case ErrNotSupp:
		return "MNT3ERR_NOTSUPP"
	case ErrServerFault:
		return "MNT3ERR_SERVERFAULT"
	}
	return ""
}

// nfs returns the nfsstat3 of the same value, whose errno s has
// (mountstat3's values are nfsstat3's, RFC 1813 section 5.1.5), or
// NFS3ERR_IO for a value mountstat3 does not define.
func (s Status) nfs() nfs3.Status {
	if s.name() == "" {
		return nfs3.ErrIO
	}
	return nfs3.Status(s)
}

// String returns the RFC 1813 name ("MNT3ERR_NOENT"), or "MNT3ERR(n)".
func (s Status) String() string {
	if name := s.name(); name != "" {
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

// Errno returns the errno of the nfsstat3 of the same value (nfs3.Status
// Errno): the errno of the same name for each mountstat3 value,
// EOPNOTSUPP for NOTSUPP, EREMOTEIO for SERVERFAULT (Linux's mount client
// uses ENOMEM there) and EIO for an unknown value; 0 for OK.
func (s Status) Errno() syscall.Errno { return s.nfs().Errno() }

// Is reports whether s matches target: a syscall.Errno equal to s.Errno(),
// or an io/fs error that s.Errno() matches (fs.ErrNotExist,
// fs.ErrPermission, errors.ErrUnsupported).
func (s Status) Is(target error) bool {
	if s == OK {
		return false
	}
	return s.nfs().Is(target)
}
