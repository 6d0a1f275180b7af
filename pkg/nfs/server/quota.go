package server

import (
	"sync"

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

// fileLocks serialise, per inode (hashed), the calls that change a file's
// allocation in a volume, so that each one's usage change is measured
// from its own pre- and post-operation st_blocks.
type fileLocks [64]sync.Mutex

func (l *fileLocks) lock(ino uint64) *sync.Mutex {
	m := &l[ino%uint64(len(l))]
	m.Lock()
	return m
}

// reserve claims n bytes of v's quota for a call in progress: false when
// used + reserved + n would pass a non-zero quota. n <= 0 always succeeds.
// Every successful reserve is followed by charge (of the real change),
// then release(n).
func (v *volume) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		r := v.reserved.Load()
		if q := v.quota.Load(); q > 0 && v.used.Load()+r+n > q {
			return false
		}
		if v.reserved.CompareAndSwap(r, r+n) {
			return true
		}
	}
}

// release returns n bytes reserved; nil-safe for calls outside volumes.
func (v *volume) release(n int64) {
	if v != nil && n > 0 {
		v.reserved.Add(-n)
	}
}

// charge applies a change of usage: bytes allocated and inodes.
func (v *volume) charge(bytes, inodes int64) {
	if bytes != 0 {
		v.used.Add(bytes)
	}
	if inodes != 0 {
		v.inodes.Add(inodes)
	}
}

func roundUp(n, bs int64) int64 {
	if bs <= 0 {
		bs = 4096
	}
	return (n + bs - 1) / bs * bs
}

func roundDown(n, bs int64) int64 {
	if bs <= 0 {
		bs = 4096
	}
	return n / bs * bs
}

// writeGrowth estimates, in bytes, what a write of n bytes at off may add
// to the allocation of the file open as fd with stat st: the blocks from
// the end of file (or off, if beyond) to the end of the write; plus, for
// the part within the file, its length rounded up to blocks when it holds
// a hole (SEEK_HOLE). Conservative but for metadata blocks, which the
// post-operation st_blocks corrects.
func writeGrowth(fd int, st *unix.Stat_t, off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	bs := int64(st.Blksize)
	end := off + n
	var g int64
	if end > st.Size {
		start := max(off, st.Size)
		g = roundUp(end, bs) - roundDown(start, bs)
	}
	if off < st.Size {
		inEnd := min(end, st.Size)
		if h, err := unix.Seek(fd, off, unix.SEEK_HOLE); err != nil || h < inEnd {
			g += roundUp(inEnd, bs) - roundDown(off, bs)
		}
	}
	return g
}

// quotaWrite runs write (a pwrite of n bytes at off on fd, the file of o)
// under v's quota: it fails with errQuota, writing nothing, when the
// estimated growth does not fit; otherwise it writes and charges the real
// change of st_blocks. Outside a volume it just writes.
func (c *call) quotaWrite(o *obj, fd int, off, n int64, write func() error) (quotaErr bool, err error) {
	v := o.ex.vol
	if v == nil {
		return false, write()
	}
	m := c.s.files.lock(o.st.Ino)
	defer m.Unlock()
	var pre, post unix.Stat_t
	if err := unix.Fstat(fd, &pre); err != nil {
		return false, err
	}
	est := int64(0)
	if v.quota.Load() > 0 {
		est = writeGrowth(fd, &pre, off, n)
	}
	if !v.reserve(est) {
		return true, nil
	}
	err = write()
	if unix.Fstat(fd, &post) == nil && post.Nlink > 0 {
		// (a file removed meanwhile was uncharged whole by REMOVE, under
		// the same lock)
		v.charge((post.Blocks-pre.Blocks)*512, 0)
	}
	v.release(est)
	return false, err
}

// quotaTruncate sets the size of the file open as fd (of o) under v's
// quota: growing it reserves the blocks up to the new size (errQuota when
// they do not fit), and the real change of st_blocks is charged.
func (c *call) quotaTruncate(o *obj, fd int, size int64) nfs3.Status {
	v := o.ex.vol
	if v == nil {
		return statusOf(unix.Ftruncate(fd, size))
	}
	m := c.s.files.lock(o.st.Ino)
	defer m.Unlock()
	var pre, post unix.Stat_t
	if err := unix.Fstat(fd, &pre); err != nil {
		return statusOf(err)
	}
	est := int64(0)
	if size > pre.Size && v.quota.Load() > 0 {
		est = roundUp(size, int64(pre.Blksize)) - roundUp(pre.Size, int64(pre.Blksize))
	}
	if !v.reserve(est) {
		return errQuota
	}
	err := unix.Ftruncate(fd, size)
	if unix.Fstat(fd, &post) == nil && post.Nlink > 0 {
		v.charge((post.Blocks-pre.Blocks)*512, 0)
	}
	v.release(est)
	return statusOf(err)
}

// reserveNew reserves, in directory o's volume, what creating an object
// of the given type allocates besides its inode: a block for a directory
// or for a symlink target too long to be stored in the inode (over 60
// bytes on ext4). It returns the amount to release, or errQuota.
func reserveNew(o *obj, dir bool, symlinkLen int) (int64, nfs3.Status) {
	v := o.ex.vol
	if v == nil || v.quota.Load() == 0 {
		return 0, nfs3.OK
	}
	var est int64
	if dir || symlinkLen > 60 {
		est = max(int64(o.st.Blksize), 4096)
	}
	if !v.reserve(est) {
		return 0, errQuota
	}
	return est, nfs3.OK
}

// chargeNew charges a new object ch (its inode and the blocks it has);
// undo (on a failed creation) charges them back.
func chargeNew(ch *obj, undo bool) {
	v := ch.ex.vol
	if v == nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(ch.fd, &st) != nil {
		st = ch.st
	}
	if undo {
		v.charge(-st.Blocks*512, -1)
		return
	}
	v.charge(st.Blocks*512, 1)
}

// chargeGone charges the removal of an entry whose stat (before removal)
// was st: its blocks and inode when it was the last link.
func chargeGone(o *obj, st *unix.Stat_t) {
	v := o.ex.vol
	if v == nil {
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
		v.charge(-st.Blocks*512, -1)
	}
}

// removeEntry runs remove (an unlink or a rename over name in directory
// o) and charges the removal of name, whose stat before was st (updated).
// In a volume, a regular file's inode lock is held across a fresh stat,
// remove and charge, so that a WRITE in progress on the file is counted
// either in the blocks uncharged here or not at all (quotaWrite skips a
// file with no link left).
func (c *call) removeEntry(o *obj, name string, st *unix.Stat_t, remove func() error) nfs3.Status {
	if o.ex.vol != nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		m := c.s.files.lock(st.Ino)
		defer m.Unlock()
		unix.Fstatat(o.fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := remove(); err != nil {
		return statusOf(err)
	}
	chargeGone(o, st)
	return nfs3.OK
}

// chargeDir charges the change of directory o's own allocation since it
// was opened (entries added or removed may grow or shrink it).
func chargeDir(o *obj) {
	v := o.ex.vol
	if v == nil || o.fd < 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(o.fd, &st) == nil && st.Blocks != o.st.Blocks {
		v.charge((st.Blocks-o.st.Blocks)*512, 0)
	}
}

// syncCharged is fsync(2) of fd (the file of o) that charges its volume
// the change of st_blocks it causes: with delayed allocation (ext4, XFS)
// writeback may allocate blocks beyond those counted at WRITE time (an
// extent tree block, say).
func (c *call) syncCharged(o *obj, fd int) error {
	v := o.ex.vol
	if v == nil {
		return unix.Fsync(fd)
	}
	m := c.s.files.lock(o.st.Ino)
	defer m.Unlock()
	var pre, post unix.Stat_t
	if err := unix.Fstat(fd, &pre); err != nil {
		return err
	}
	err := unix.Fsync(fd)
	if unix.Fstat(fd, &post) == nil && post.Nlink > 0 {
		v.charge((post.Blocks-pre.Blocks)*512, 0)
	}
	return err
}
