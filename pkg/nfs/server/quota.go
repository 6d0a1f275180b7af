package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// errQuota is the status of a call that would grow a volume past its
// quota: NFS3ERR_NOSPC, as knfsd answers over an XFS project quota (what
// an export-per-directory quota is on Linux), which NFS clients, our FUSE
// mount included, report as ENOSPC, the error df(1) and applications
// expect of a full volume. NFS3ERR_DQUOT (EDQUOT, "disk quota exceeded")
// is what a per-user quota gives; a volume's quota is its capacity, not a
// user's share, so it is not used.
const errQuota = nfs3.ErrNoSpc

// quotaVolume is the quota of a volume export (*volumes.Volume): every
// modifying call through the export has its growth checked and its
// inodes' usage recorded there. The methods take the file's inode lock
// themselves; the server holds none of its own locks when it calls them.
type quotaVolume interface {
	Write(fd int, kh unix.FileHandle, ino uint64, off, n int64, stable nfs3.StableHow, write func() error) (over bool, err error)
	Truncate(fd int, ino uint64, size int64) (over bool, err error)
	ReserveNew(blksize int64, dir bool, symlinkLen int) (int64, bool)
	Release(n int64)
	ChargeNew(st unix.Stat_t, undo bool)
	ChargeGone(st *unix.Stat_t)
	ChargeDir(fd int, st *unix.Stat_t) bool
	Remove(dirfd int, name string, st *unix.Stat_t, remove func() error) error
	Sync(fd int, ino uint64) error
	Quota() (quota, used int64)
}

// syncStable makes a WRITE's data as stable as asked: fdatasync(2) for
// DATA_SYNC, fsync(2) for FILE_SYNC, nothing for UNSTABLE.
func syncStable(fd int, stable nfs3.StableHow) error {
	switch stable {
	case nfs3.DataSync:
		return unix.Fdatasync(fd)
	case nfs3.FileSync:
		return unix.Fsync(fd)
	}
	return nil
}

// quotaWrite runs write (a pwrite of n bytes at off on fd, the file of o)
// and makes its data as stable as asked (syncStable); in a volume, under
// its quota (quotaVolume.Write): quotaErr, nothing written, when the
// growth does not fit.
func (c *call) quotaWrite(o *obj, fd int, off, n int64, stable nfs3.StableHow, write func() error) (quotaErr bool, err error) {
	ws := func() error {
		if err := write(); err != nil {
			return err
		}
		return syncStable(fd, stable)
	}
	if v := o.ex.vol; v != nil {
		return v.Write(fd, o.kh, o.st.Ino, off, n, stable, ws)
	}
	return false, ws()
}

// quotaTruncate sets the size of the file open as fd (of o); in a volume,
// under its quota (errQuota when the growth does not fit).
func (c *call) quotaTruncate(o *obj, fd int, size int64) nfs3.Status {
	v := o.ex.vol
	if v == nil {
		return statusOf(unix.Ftruncate(fd, size))
	}
	over, err := v.Truncate(fd, o.st.Ino, size)
	if over {
		return errQuota
	}
	return statusOf(err)
}

// reserveNew reserves, in directory o's volume, what creating an object
// of the given type allocates besides its inode (quotaVolume.ReserveNew).
// It returns the amount to release, or errQuota.
func reserveNew(o *obj, dir bool, symlinkLen int) (int64, nfs3.Status) {
	v := o.ex.vol
	if v == nil {
		return 0, nfs3.OK
	}
	est, ok := v.ReserveNew(int64(o.st.Blksize), dir, symlinkLen)
	if !ok {
		return 0, errQuota
	}
	return est, nfs3.OK
}

// release returns n bytes reserved by reserveNew in o's volume.
func release(o *obj, n int64) {
	if v := o.ex.vol; v != nil {
		v.Release(n)
	}
}

// chargeNew sets the record of a new object ch (its inode and the blocks
// it has; ch.st taken after its creation); undo (on a failed creation,
// after it was removed) forgets it.
func chargeNew(ch *obj, undo bool) {
	if v := ch.ex.vol; v != nil {
		v.ChargeNew(ch.st, undo)
	}
}

// chargeGone charges the removal of an entry of directory o whose stat
// (before removal) was st.
func chargeGone(o *obj, st *unix.Stat_t) {
	if v := o.ex.vol; v != nil {
		v.ChargeGone(st)
	}
}

// removeEntry runs remove (an unlink or a rename over name in directory
// o) and charges the removal of name, whose stat before was st (updated;
// quotaVolume.Remove).
// A removed regular file's READ mappings and cached open files are
// dropped (readMap.forget, fileCache.forget), so that they do not keep its
// space.
func (c *call) removeEntry(o *obj, name string, st *unix.Stat_t, remove func() error) nfs3.Status {
	dev, ino, reg := st.Dev, st.Ino, st.Mode&unix.S_IFMT == unix.S_IFREG
	var err error
	if v := o.ex.vol; v != nil {
		err = v.Remove(o.fd, name, st, remove)
	} else {
		err = remove()
	}
	if err == nil && reg {
		c.s.rmap.forget(dev, ino)
		c.s.files.forget(dev, ino)
	}
	return statusOf(err)
}

// chargeDir sets the record of directory o after a change of its entries;
// the stat it takes is o's post-operation attributes (obj.wcc).
func chargeDir(o *obj) {
	if v := o.ex.vol; v != nil && o.fd >= 0 {
		o.posted = v.ChargeDir(o.fd, &o.post)
	}
}

// syncCharged is fsync(2) of fd (the file of o) for COMMIT; in a volume,
// the file's usage is recorded after it (quotaVolume.Sync).
func (c *call) syncCharged(o *obj, fd int) error {
	if v := o.ex.vol; v != nil {
		return v.Sync(fd, o.st.Ino)
	}
	return unix.Fsync(fd)
}
