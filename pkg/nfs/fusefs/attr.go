package fusefs

import (
	"hash/fnv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// typeBits returns the S_IFMT bits of an NFS file type.
func typeBits(t nfs3.FileType) uint32 {
	switch t {
	case nfs3.TypeDir:
		return syscall.S_IFDIR
	case nfs3.TypeBlk:
		return syscall.S_IFBLK
	case nfs3.TypeChr:
		return syscall.S_IFCHR
	case nfs3.TypeLnk:
		return syscall.S_IFLNK
	case nfs3.TypeSock:
		return syscall.S_IFSOCK
	case nfs3.TypeFIFO:
		return syscall.S_IFIFO
	}
	return syscall.S_IFREG
}

// stableAttr is the go-fuse identity of a file: fileid as inode number
// and a hash of the file handle as generation.
func stableAttr(fh nfs3.FH, a *nfs3.Fattr) fs.StableAttr {
	h := fnv.New64a()
	h.Write(fh.Bytes())
	return fs.StableAttr{Mode: typeBits(a.Type), Ino: a.FileID, Gen: h.Sum64()}
}

// fillAttr converts NFS attributes to FUSE attributes (sizes in bytes,
// blocks of 512 bytes, times to the nanosecond).
func fillAttr(out *fuse.Attr, a *nfs3.Fattr, blksize uint32) {
	out.Ino = a.FileID
	out.Size = a.Size
	out.Blocks = (a.Used + 511) / 512
	out.Atime, out.Atimensec = uint64(a.Atime.Seconds), a.Atime.Nseconds
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Seconds), a.Mtime.Nseconds
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Seconds), a.Ctime.Nseconds
	out.Mode = typeBits(a.Type) | a.Mode&0o7777
	out.Nlink = a.Nlink
	out.Owner = fuse.Owner{Uid: a.UID, Gid: a.GID}
	if a.Type == nfs3.TypeBlk || a.Type == nfs3.TypeChr {
		out.Rdev = uint32(unixMkdev(a.Rdev.Major, a.Rdev.Minor))
	}
	out.Blksize = blksize
}

// unixMkdev is the Linux new_encode_dev of major and minor, 32 bits.
func unixMkdev(major, minor uint32) uint32 {
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12
}

// attrCache is the adaptive attribute timeout of one inode, as Linux's
// nfs_inode attrtimeo: reset to min when the attributes changed, doubled
// up to max when a refresh found them unchanged.
type attrCache struct {
	attr  nfs3.Fattr
	valid bool
	timeo time.Duration
	at    time.Time // when attr was recorded
	// ours: attr are the post-operation attributes (wcc data) of a change
	// made through this mount, not yet superseded by a GETATTR or LOOKUP
	// (node.cachedDirAttr).
	ours bool
}

// update records fresh attributes a and returns the timeout to give the
// kernel and whether the file's data may have changed (mtime, ctime or
// size differ from the previous attributes).
func (c *attrCache) update(a *nfs3.Fattr, lo, hi time.Duration) (timeo time.Duration, changed bool) {
	changed = c.valid && (a.Mtime != c.attr.Mtime || a.Size != c.attr.Size || a.Ctime != c.attr.Ctime)
	switch {
	case !c.valid || changed || c.timeo < lo:
		c.timeo = lo
	default:
		c.timeo = min(2*c.timeo, hi)
		if c.timeo == 0 {
			c.timeo = lo
		}
	}
	c.attr, c.valid, c.at, c.ours = *a, true, time.Now(), false
	return c.timeo, changed
}
