package volumes

import (
	"context"
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Usage accounting
//
// A volume's usage is kept per inode: acct.recs maps each inode of the
// volume (st_dev, st_ino: hard links once) to the bytes it was last seen
// to allocate (st_blocks*512), and volume.used and volume.inodes are
// always the sum and the count of those records. A rescan (recount: at
// registration, at start, Registry.Rescan) fills the records from a walk of
// the tree; every modifying NFS call then sets the records of the inodes
// it touches from a fresh stat, under the inode's lock (fileLocks), before
// and after the operation. Setting a record charges the difference from
// the record, not from the call's own pre-operation stat, so blocks the
// kernel allocated between two calls (delayed allocation: ext4 and XFS
// count dirty data in st_blocks at write(2) time, but allocate the extent
// tree or bmbt blocks that map it only at writeback) are picked up by the
// next call that touches the inode, exactly once, and a truncation or a
// removal takes back exactly what was charged.
//
// Between calls, writeback may still add such metadata blocks to a file
// with dirty data. So that the usage a decision sees is an upper bound of
// the real one, every UNSTABLE WRITE marks its inode dirty with an
// allowance (slack) for them, metaAllowance; the volume's slack (the sum)
// counts against the quota besides the usage and the reservations of calls
// in progress. The slack of an inode is consumed by the growth seen at the
// next touch and dropped when its data is synced (COMMIT, a stable WRITE).
// When a call would fit the quota but for the slack, the volume's dirty
// inodes are synced (fsync(2), as ext4 flushes delayed allocations before
// it reports ENOSPC) and their records set, and the call is decided again
// on exact figures. So a volume passes its quota only by what calls in
// progress allocate beyond their estimate (writeGrowth counts data blocks:
// the metadata blocks of the one WRITE that fills the quota, say). The
// usage the admin API reports is the sum of the records after a fresh
// stat of the dirty inodes (refreshDirty), without the slack.
//
// Memory: one record per inode of a volume (about 40 bytes), plus the
// kernel file handle of each dirty inode.
//
// Not counted until the next rescan (the registry restarting, as New counts
// every volume it restores, or a call of Registry.Rescan, which nothing
// schedules yet): changes made outside the volume's export (the root
// export, local processes) to inodes no call through the volume touches
// afterwards; a file moved to another volume by such means (NFS calls
// cannot: RENAME and LINK across exports are NFS3ERR_XDEV).

// inodeKey identifies an inode of the root's file system.
type inodeKey struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) inodeKey { return inodeKey{dev: st.Dev, ino: st.Ino} }

// dirtyInode is an inode with data written UNSTABLE and not synced since.
type dirtyInode struct {
	kh    unix.FileHandle // to open it again (open_by_handle_at)
	slack int64           // bytes: allowance for metadata writeback may still allocate
}

// acct is a volume's per-inode usage (see above).
type acct struct {
	mu     sync.Mutex // guards the fields below, and changes of volume.used, .inodes, .slack
	recs   map[inodeKey]int64
	dirty  map[inodeKey]*dirtyInode
	scan   map[inodeKey]struct{} // inodes set or forgotten during a rescan's walk; nil outside one
	missed map[inodeKey]struct{} // records the last walk kept without visiting them

	scanMu  sync.Mutex // one rescan at a time
	flushMu sync.Mutex // one flush of the dirty inodes at a time
}

// setLocked records that inode k allocates bytes and charges the
// difference from its record, which it returns; an inode without a record
// is adopted (bytes and one inode charged). acct.mu is held.
func (v *Volume) setLocked(k inodeKey, bytes int64) int64 {
	a := &v.acct
	if a.recs == nil {
		a.recs = map[inodeKey]int64{}
	}
	if a.scan != nil {
		a.scan[k] = struct{}{}
	}
	delete(a.missed, k) // it exists
	old, ok := a.recs[k]
	a.recs[k] = bytes
	if !ok {
		v.inodes.Add(1)
		v.used.Add(bytes)
		return bytes
	}
	if d := bytes - old; d != 0 {
		v.used.Add(d)
		return d
	}
	return 0
}

// observe records st of an inode that still has a link (observeLocked)
// and returns its key and whether it has one.
func (v *Volume) observe(st *unix.Stat_t) (k inodeKey, live bool) {
	k, live = keyOf(st), st.Nlink > 0
	if live {
		v.acct.mu.Lock()
		v.observeLocked(k, st)
		v.acct.mu.Unlock()
	}
	return k, live
}

// observeLocked is setLocked for a stat taken outside any operation on
// the inode (before one, or by refreshDirty): growth seen there was made
// by writeback and consumes the inode's slack. acct.mu is held.
func (v *Volume) observeLocked(k inodeKey, st *unix.Stat_t) {
	g := v.setLocked(k, st.Blocks*512)
	if d := v.acct.dirty[k]; d != nil && g > 0 {
		c := min(g, d.slack)
		d.slack -= c
		v.slack.Add(-c)
	}
}

// forgetLocked removes inode k's record, uncharging what it held and its
// inode. acct.mu is held.
func (v *Volume) forgetLocked(k inodeKey) {
	a := &v.acct
	if a.scan != nil {
		a.scan[k] = struct{}{}
	}
	if old, ok := a.recs[k]; ok {
		delete(a.recs, k)
		v.used.Add(-old)
		v.inodes.Add(-1)
	}
	v.cleanLocked(k)
}

// cleanLocked marks inode k's data synced: its slack is dropped.
// acct.mu is held.
func (v *Volume) cleanLocked(k inodeKey) {
	if d := v.acct.dirty[k]; d != nil {
		v.slack.Add(-d.slack)
		delete(v.acct.dirty, k)
	}
}

// dirtyLocked marks inode k (kernel handle kh) dirty with add more bytes
// of slack, its slack bounded by limit. acct.mu is held.
func (v *Volume) dirtyLocked(k inodeKey, kh unix.FileHandle, add, limit int64) {
	a := &v.acct
	if a.dirty == nil {
		a.dirty = map[inodeKey]*dirtyInode{}
	}
	d := a.dirty[k]
	if d == nil {
		d = &dirtyInode{kh: kh}
		a.dirty[k] = d
	}
	s := min(d.slack+add, max(limit, d.slack))
	v.slack.Add(s - d.slack)
	d.slack = s
}

// capSlackLocked bounds inode k's slack by limit (after a truncation).
// acct.mu is held.
func (v *Volume) capSlackLocked(k inodeKey, limit int64) {
	if d := v.acct.dirty[k]; d != nil && d.slack > limit {
		v.slack.Add(limit - d.slack)
		d.slack = limit
	}
}

// metaAllowance bounds, in bytes, the metadata blocks writeback may
// allocate to map n bytes of dirty data in a file system of block size bs:
// one leaf block per bs/32 data blocks (an ext4 extent is 12 bytes, an
// XFS bmbt record 16, each mapping at least one block), plus one for a
// split leaf and one for a new level of the tree.
func metaAllowance(n, bs int64) int64 {
	if n <= 0 {
		return 0
	}
	if bs <= 0 {
		bs = 4096
	}
	blocks := (n+bs-1)/bs + 1 // a write may straddle one more block
	per := max(bs/32, 1)
	return bs * (2 + (blocks+per-1)/per)
}

// reserve claims n bytes of v's quota for a call in progress: false when
// used + slack + reserved + n would pass a non-zero quota. n <= 0 always
// succeeds. Every successful reserve is followed by the setting of the
// records the call changes, then release(n).
func (v *Volume) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		r := v.reserved.Load()
		if q := v.quota.Load(); q > 0 && v.used.Load()+v.slack.Load()+r+n > q {
			return false
		}
		if v.reserved.CompareAndSwap(r, r+n) {
			return true
		}
	}
}

// release returns n bytes reserved.
func (v *Volume) release(n int64) {
	if n > 0 {
		v.reserved.Add(-n)
	}
}

// flushDirty syncs v's dirty inodes and sets their records, so that a
// call needing n bytes that would fit the quota but for the slack is
// decided on exact figures. It reports whether it did (false: no slack,
// or n does not fit even without it). No inode lock may be held.
func (v *Volume) flushDirty(n int64) bool {
	if v.slack.Load() == 0 || v.reg.Load() == nil {
		return false
	}
	if q := v.quota.Load(); q > 0 && v.used.Load()+v.reserved.Load()+n > q {
		return false
	}
	v.acct.flushMu.Lock()
	defer v.acct.flushMu.Unlock()
	v.settleDirty(true)
	return true
}

// refreshDirty sets the records of v's dirty inodes from a fresh stat
// (not synced: they stay dirty), so that blocks writeback allocated since
// their last call are counted. No inode lock may be held.
func (v *Volume) refreshDirty() {
	if v.reg.Load() != nil {
		v.settleDirty(false)
	}
}

func (v *Volume) settleDirty(sync bool) {
	type item struct {
		k  inodeKey
		kh unix.FileHandle
	}
	v.acct.mu.Lock()
	list := make([]item, 0, len(v.acct.dirty))
	for k, d := range v.acct.dirty {
		list = append(list, item{k, d.kh})
	}
	v.acct.mu.Unlock()
	flags := unix.O_PATH
	if sync {
		flags = unix.O_RDONLY
	}
	for _, it := range list {
		fd, err := unix.OpenByHandleAt(v.r.rootFD, it.kh, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK)
		if err != nil {
			if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
				v.acct.mu.Lock()
				v.cleanLocked(it.k) // gone: the record goes with REMOVE or the next rescan (restart, Registry.Rescan)
				v.acct.mu.Unlock()
			}
			continue
		}
		m := v.r.files.lock(it.k.ino)
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		if serr == nil && sync {
			if serr = unix.Fsync(fd); serr == nil {
				serr = unix.Fstat(fd, &st)
			}
		}
		if serr == nil && keyOf(&st) == it.k && st.Nlink > 0 {
			v.acct.mu.Lock()
			v.observeLocked(it.k, &st)
			if sync {
				v.cleanLocked(it.k)
			}
			v.acct.mu.Unlock()
		}
		m.Unlock()
		unix.Close(fd)
	}
}

// fileLocks serialise, per inode (hashed), the calls that change a file's
// allocation in a volume, so that each one's records are set from stats
// taken in order. A holder never takes a second one.
type fileLocks [64]sync.Mutex

func (l *fileLocks) lock(ino uint64) *sync.Mutex {
	m := &l[ino%uint64(len(l))]
	m.Lock()
	return m
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
// to the data allocation of the file open as fd with stat st: the blocks
// from the end of file (or off, if beyond) to the end of the write; plus,
// for the part within the file, its length rounded up to blocks when it
// holds a hole (SEEK_HOLE). Metadata blocks are not included (the slack
// and the post-operation stat count them).
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

// Write runs write (a pwrite of n bytes at off on fd, the open file of
// inode ino with kernel handle kh, then the sync stable asks for: RFC
// 1813 section 3.3.7) under v's quota: it reports over, writing nothing,
// when the estimated data growth does not fit; otherwise it writes, sets
// the file's record from the post-operation stat, and marks it dirty
// (UNSTABLE) or clean (synced). err is write's.
func (v *Volume) Write(fd int, kh unix.FileHandle, ino uint64, off, n int64, stable nfs3.StableHow, write func() error) (over bool, err error) {
	return v.change(fd, ino,
		func(pre unix.Stat_t) int64 { return writeGrowth(fd, &pre, off, n) },
		write,
		func(k inodeKey, post unix.Stat_t, err error) {
			v.setLocked(k, post.Blocks*512)
			switch {
			case stable != nfs3.Unstable && err == nil:
				v.cleanLocked(k)
			case n > 0:
				bs := int64(post.Blksize)
				v.dirtyLocked(k, kh, metaAllowance(n, bs), metaAllowance(post.Size, bs))
			}
		})
}

// Truncate sets the size of fd (the open file of inode ino) under v's
// quota: growing it reserves the blocks up to the new size (over, nothing
// changed, when they do not fit), and the file's record is set from the
// post-operation stat. err is ftruncate(2)'s or fstat(2)'s.
func (v *Volume) Truncate(fd int, ino uint64, size int64) (over bool, err error) {
	return v.change(fd, ino,
		func(pre unix.Stat_t) int64 {
			if size <= pre.Size {
				return 0
			}
			return roundUp(size, int64(pre.Blksize)) - roundUp(pre.Size, int64(pre.Blksize))
		},
		func() error { return unix.Ftruncate(fd, size) },
		func(k inodeKey, post unix.Stat_t, _ error) {
			v.setLocked(k, post.Blocks*512)
			v.capSlackLocked(k, metaAllowance(post.Size, int64(post.Blksize)))
		})
}

// change runs op on fd (the open file of inode ino) under v's quota, with
// the file's lock held: it reserves the data growth grow estimates from
// the pre-operation stat (when v has a quota), reporting over without
// running op when that does not fit even after flushing dirty files
// once; then it runs op and hands the post-operation stat to record
// (called with v.acct.mu held), unless the file has no link left (REMOVE
// forgot it under the same lock: changed, not counted). err is op's, or
// fstat(2)'s before it.
func (v *Volume) change(fd int, ino uint64, grow func(pre unix.Stat_t) int64, op func() error, record func(k inodeKey, post unix.Stat_t, err error)) (over bool, err error) {
	for flushed := false; ; flushed = true {
		m := v.r.files.lock(ino)
		var pre unix.Stat_t
		if err := unix.Fstat(fd, &pre); err != nil {
			m.Unlock()
			return false, err
		}
		k, live := v.observe(&pre)
		est := int64(0)
		if v.quota.Load() > 0 {
			est = grow(pre)
		}
		if !v.reserve(est) {
			m.Unlock()
			if !flushed && v.flushDirty(est) {
				continue
			}
			return true, nil
		}
		err = op()
		var post unix.Stat_t
		if live && unix.Fstat(fd, &post) == nil && post.Nlink > 0 {
			v.acct.mu.Lock()
			record(k, post, err)
			v.acct.mu.Unlock()
		}
		v.release(est)
		m.Unlock()
		return false, err
	}
}

// ReserveNew reserves what creating an object of the given type in a
// directory of block size blksize allocates besides its inode: a block
// for a directory or for a symlink target too long to be stored in the
// inode (over 60 bytes on ext4). It returns the amount to Release, and
// false when it does not fit the quota.
func (v *Volume) ReserveNew(blksize int64, dir bool, symlinkLen int) (int64, bool) {
	if v.quota.Load() == 0 {
		return 0, true
	}
	var est int64
	if dir || symlinkLen > 60 {
		est = max(blksize, 4096)
	}
	if !v.reserve(est) && !(v.flushDirty(est) && v.reserve(est)) {
		return 0, false
	}
	return est, true
}

// Release returns n bytes reserved by ReserveNew.
func (v *Volume) Release(n int64) { v.release(n) }

// ChargeNew sets the record of a new object whose stat, taken after its
// creation, is st (its inode and the blocks it has); undo (on a failed
// creation, after it was removed) forgets it.
func (v *Volume) ChargeNew(st unix.Stat_t, undo bool) {
	v.acct.mu.Lock()
	if undo {
		v.forgetLocked(keyOf(&st))
	} else {
		v.setLocked(keyOf(&st), st.Blocks*512)
	}
	v.acct.mu.Unlock()
}

// ChargeGone charges the removal of an entry whose stat (before removal)
// was st: its record is forgotten when it was the last link (or a
// directory), else set from st (the inode was touched).
func (v *Volume) ChargeGone(st *unix.Stat_t) {
	v.acct.mu.Lock()
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
		v.forgetLocked(keyOf(st))
	} else {
		v.observeLocked(keyOf(st), st)
	}
	v.acct.mu.Unlock()
}

// Remove runs remove (an unlink or a rename over name in directory dirfd)
// and charges the removal of name, whose stat before was st (updated).
// For a regular file the inode lock is held across a fresh stat, remove
// and charge, so that a Write in progress on the file is counted either
// in the record forgotten here or not at all (Write skips a file with no
// link left). It returns remove's error (nothing charged then).
func (v *Volume) Remove(dirfd int, name string, st *unix.Stat_t, remove func() error) error {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		m := v.r.files.lock(st.Ino)
		defer m.Unlock()
		unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := remove(); err != nil {
		return err
	}
	v.ChargeGone(st)
	return nil
}

// ChargeDir sets the record of the directory open as fd after a change of
// its entries (which may grow or shrink it), from a stat it takes into st
// (false when fstat(2) failed). The stat is taken under acct.mu, so that
// concurrent calls in one directory set its record in the order of their
// stats.
func (v *Volume) ChargeDir(fd int, st *unix.Stat_t) bool {
	v.acct.mu.Lock()
	defer v.acct.mu.Unlock()
	if unix.Fstat(fd, st) != nil {
		return false
	}
	if st.Nlink > 0 {
		v.setLocked(keyOf(st), st.Blocks*512)
	}
	return true
}

// Sync is fsync(2) of fd (the open file of inode ino) for COMMIT: the
// file's record is set from the stat after it (writeback allocated the
// metadata of its delayed data) and its slack dropped.
func (v *Volume) Sync(fd int, ino uint64) error {
	m := v.r.files.lock(ino)
	defer m.Unlock()
	err := unix.Fsync(fd)
	var post unix.Stat_t
	if unix.Fstat(fd, &post) == nil && post.Nlink > 0 {
		k := keyOf(&post)
		v.acct.mu.Lock()
		v.observeLocked(k, &post)
		if err == nil {
			v.cleanLocked(k)
		}
		v.acct.mu.Unlock()
	}
	return err
}

// Quota returns v's quota (0: unlimited) and its usage, in bytes
// allocated, as FSSTAT reports them.
func (v *Volume) Quota() (quota, used int64) { return v.quota.Load(), v.used.Load() }

// volumeTable walks directory rel beneath rootFD (itself included, not
// crossing mount points, never following a symlink) and returns each
// inode's allocation in bytes (st_blocks*512), hard links once.
func volumeTable(ctx context.Context, rootFD int, rel string) (map[inodeKey]int64, error) {
	d, err := openDirBeneath(rootFD, rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return nil, err
	}
	t := map[inodeKey]int64{keyOf(&st): st.Blocks * 512}
	err = walkTree(ctx, d, st.Dev, func(_ *os.File, _ string, est *unix.Stat_t) error {
		t[keyOf(est)] = est.Blocks * 512
		return nil
	})
	return t, err
}

// rescan sets v's records from walks of its directory p while calls go
// on: the records they set or forget during a walk win over what the walk
// saw. A record the walk did not visit may be of an inode removed or moved
// away outside the volume's export, or of a file a call renamed from a
// directory not yet walked into one already walked: it is kept (an upper
// bound) and dropped only when a second walk does not visit it either, so
// rescan walks again when the first walk missed records. On a walk error
// (or ctx's) it returns it, v as it was or as after the first walk.
func (v *Volume) rescan(ctx context.Context, rootFD int, p string) error {
	a := &v.acct
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	for range 2 {
		missed, err := v.scanOnce(ctx, rootFD, p)
		if err != nil || !missed {
			return err
		}
	}
	return nil
}

// scanOnce is one walk of rescan; it reports whether records were missed
// for the first time. acct.scanMu is held.
func (v *Volume) scanOnce(ctx context.Context, rootFD int, p string) (bool, error) {
	a := &v.acct
	a.mu.Lock()
	a.scan = map[inodeKey]struct{}{}
	a.mu.Unlock()
	t, err := volumeTable(ctx, rootFD, p)
	a.mu.Lock()
	defer a.mu.Unlock()
	touched := a.scan
	a.scan = nil
	if err != nil {
		return false, err
	}
	for k := range touched {
		if b, ok := a.recs[k]; ok {
			t[k] = b
		} else {
			delete(t, k)
		}
	}
	missed := map[inodeKey]struct{}{}
	for k, b := range a.recs {
		if _, ok := t[k]; ok {
			continue
		}
		if _, again := a.missed[k]; !again {
			t[k] = b
			missed[k] = struct{}{}
		}
	}
	a.missed = missed
	a.recs = t
	var used, slack int64
	for _, b := range t {
		used += b
	}
	for k, d := range a.dirty {
		if _, ok := t[k]; !ok {
			delete(a.dirty, k)
			continue
		}
		slack += d.slack
	}
	v.used.Store(used)
	v.inodes.Store(int64(len(t)))
	v.slack.Store(slack)
	return len(missed) > 0, nil
}
