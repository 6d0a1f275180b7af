package nfs3

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestStatusMapping(t *testing.T) {
	cases := []struct {
		s      Status
		name   string
		errno  syscall.Errno
		kernel syscall.Errno
	}{
		{ErrPerm, "NFS3ERR_PERM", syscall.EPERM, syscall.EPERM},
		{ErrNoEnt, "NFS3ERR_NOENT", syscall.ENOENT, syscall.ENOENT},
		{ErrIO, "NFS3ERR_IO", syscall.EIO, syscall.EIO},
		{ErrNXIO, "NFS3ERR_NXIO", syscall.ENXIO, syscall.ENXIO},
		{ErrAccess, "NFS3ERR_ACCES", syscall.EACCES, syscall.EACCES},
		{ErrExist, "NFS3ERR_EXIST", syscall.EEXIST, syscall.EEXIST},
		{ErrXDev, "NFS3ERR_XDEV", syscall.EXDEV, syscall.EXDEV},
		{ErrNoDev, "NFS3ERR_NODEV", syscall.ENODEV, syscall.ENODEV},
		{ErrNotDir, "NFS3ERR_NOTDIR", syscall.ENOTDIR, syscall.ENOTDIR},
		{ErrIsDir, "NFS3ERR_ISDIR", syscall.EISDIR, syscall.EISDIR},
		{ErrInval, "NFS3ERR_INVAL", syscall.EINVAL, syscall.EINVAL},
		{ErrFBig, "NFS3ERR_FBIG", syscall.EFBIG, syscall.EFBIG},
		{ErrNoSpc, "NFS3ERR_NOSPC", syscall.ENOSPC, syscall.ENOSPC},
		{ErrROFS, "NFS3ERR_ROFS", syscall.EROFS, syscall.EROFS},
		{ErrMLink, "NFS3ERR_MLINK", syscall.EMLINK, syscall.EMLINK},
		{ErrNameTooLong, "NFS3ERR_NAMETOOLONG", syscall.ENAMETOOLONG, syscall.ENAMETOOLONG},
		{ErrNotEmpty, "NFS3ERR_NOTEMPTY", syscall.ENOTEMPTY, syscall.ENOTEMPTY},
		{ErrDQuot, "NFS3ERR_DQUOT", syscall.EDQUOT, syscall.EDQUOT},
		{ErrStale, "NFS3ERR_STALE", syscall.ESTALE, syscall.ESTALE},
		{ErrRemote, "NFS3ERR_REMOTE", syscall.EREMOTE, syscall.EREMOTE},
		{ErrBadHandle, "NFS3ERR_BADHANDLE", syscall.ESTALE, EBADHANDLE},
		{ErrNotSync, "NFS3ERR_NOT_SYNC", syscall.EIO, ENOTSYNC},
		{ErrBadCookie, "NFS3ERR_BAD_COOKIE", syscall.EINVAL, EBADCOOKIE},
		{ErrNotSupp, "NFS3ERR_NOTSUPP", syscall.EOPNOTSUPP, ENOTSUPP},
		{ErrTooSmall, "NFS3ERR_TOOSMALL", syscall.EINVAL, ETOOSMALL},
		{ErrServerFault, "NFS3ERR_SERVERFAULT", syscall.EREMOTEIO, syscall.EREMOTEIO},
		{ErrBadType, "NFS3ERR_BADTYPE", syscall.EINVAL, EBADTYPE},
		{ErrJukebox, "NFS3ERR_JUKEBOX", syscall.EAGAIN, EJUKEBOX},
		{Status(9999), "NFS3ERR(9999)", syscall.EIO, syscall.EIO},
	}
	for _, c := range cases {
		if c.s.String() != c.name || c.s.Errno() != c.errno || c.s.KernelErrno() != c.kernel {
			t.Errorf("%d: %s %v %v, want %s %v %v", uint32(c.s), c.s, c.s.Errno(), c.s.KernelErrno(), c.name, c.errno, c.kernel)
		}
		if c.s.Errno() >= 512 {
			t.Errorf("%s: user errno %d is kernel-internal", c.s, c.s.Errno())
		}
		wrapped := fmt.Errorf("lookup x: %w", c.s)
		if !errors.Is(wrapped, c.s) || !errors.Is(wrapped, c.errno) || c.s.Err() == nil {
			t.Errorf("%s: errors.Is through wrapping", c.s)
		}
	}
	if OK.String() != "NFS3_OK" || OK.Err() != nil || OK.Errno() != 0 || errors.Is(OK, syscall.Errno(0)) {
		t.Fatal("OK")
	}
}

func TestStatusIsFS(t *testing.T) {
	wrap := func(s Status) error { return fmt.Errorf("op: %w", s) }
	checks := []struct {
		err    error
		target error
		want   bool
	}{
		{wrap(ErrNoEnt), fs.ErrNotExist, true},
		{wrap(ErrStale), fs.ErrNotExist, false},
		{wrap(ErrExist), fs.ErrExist, true},
		{wrap(ErrNotEmpty), fs.ErrExist, true},
		{wrap(ErrPerm), fs.ErrPermission, true},
		{wrap(ErrAccess), fs.ErrPermission, true},
		{wrap(ErrROFS), fs.ErrPermission, false},
		{wrap(ErrNotSupp), errors.ErrUnsupported, true},
		{wrap(ErrNoEnt), ErrStale, false},
		{wrap(ErrNoEnt), syscall.ENOENT, true},
		{wrap(ErrNoEnt), syscall.EEXIST, false},
	}
	for _, c := range checks {
		if got := errors.Is(c.err, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %v) = %v", c.err, c.target, got)
		}
	}
	if !ErrJukebox.Temporary() || ErrIO.Temporary() {
		t.Error("Temporary")
	}
	if ErrNoEnt.Error() != "NFS3ERR_NOENT: no such file or directory" {
		t.Errorf("Error() = %q", ErrNoEnt.Error())
	}
}
