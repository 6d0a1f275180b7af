package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// node is one NFS file, directory or other object known to the kernel:
// what a file is, its NFS file handle, its attributes and their cache,
// its names (lookups, directory changes and listings) and the server's
// ACCESS answers for it. What an open of a regular file does is its
// openFile's (openfile.go), as go-fuse's loopback node leaves file I/O to
// its file handle; what the opens of one inode share is its sharedFile.
type node struct {
	fs.Inode
	sys *fsys
	fh  nfs3.FH

	mu     sync.Mutex
	ac     attrCache
	plus   map[string]nfs3.EntryPlus // READDIRPLUS entries not yet looked up (directories)
	names  *dirNames                 // the whole listing, when known (directories; dirnames.go)
	plusAt time.Time                 // when plus was read
	acc    []accessEntry             // ACCESS answers per credential, least recently used first (access.go)
	seen   entry                     // where and when the kernel was last told of this node (access.go)

	// shared is what the open files of a regular file share (write-back,
	// the count of opens, silly rename; openfile.go): nil until its first
	// open.
	shared atomic.Pointer[sharedFile]
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeAccesser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
)

// timeouts returns the attribute cache bounds for n's type.
func (n *node) timeouts(isDir bool) (time.Duration, time.Duration) {
	if isDir {
		return n.sys.o.DirTimeouts()
	}
	return n.sys.o.RegTimeouts()
}

// refresh records fresh attributes and returns the attribute timeout and
// whether the data may have changed.
func (n *node) refresh(a *nfs3.Fattr) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.refreshLocked(a)
}

// refreshLocked is refresh with n.mu held. When a directory searchable
// by all stops being so, the kernel's cached names in it are dropped
// (unsearchable).
func (n *node) refreshLocked(a *nfs3.Fattr) (time.Duration, bool) {
	lo, hi := n.timeouts(a.Type == nfs3.TypeDir)
	was := n.ac.attr.Type == nfs3.TypeDir && n.ac.attr.Mode&0o111 == 0o111
	timeo, changed := n.ac.update(a, lo, hi)
	if was && a.Mode&0o111 != 0o111 {
		go n.unsearchable()
	}
	return timeo, changed
}

// child returns the inode for (fh, a), named name in n, creating the node
// if the kernel does not know it yet, and fills out (entry timeout:
// childEntry).
func (n *node) child(ctx context.Context, name string, fh nfs3.FH, a *nfs3.Fattr, out *fuse.EntryOut) *fs.Inode {
	ch := n.NewInode(ctx, &node{sys: n.sys, fh: fh}, stableAttr(fh, a))
	cn := ch.Operations().(*node)
	timeo, _ := cn.refresh(a)
	fillAttr(&out.Attr, a, n.sys.blksize)
	out.SetAttrTimeout(timeo)
	out.SetEntryTimeout(n.childEntry(cn, name))
	return ch
}

// cachedDirAttr returns the attributes of directory n and how long they
// stay fresh when they came from the wcc data of a change made through
// this mount within the attribute timeout (false otherwise). The kernel
// forgets a directory's attributes after every create, unlink or rename
// in it (fs/fuse/dir.c fuse_dir_changed), and its permission check of the
// next one asks for them again (default_permissions): answered from
// here, as Linux NFS answers from the attributes its CREATE and REMOVE
// replies carry (nfs_post_op_update_inode), a create or unlink costs no
// NFS GETATTR. Attributes read by GETATTR or LOOKUP are not answered from
// here, so the kernel's refresh before it denies (fuse_permission) still
// sees a permission granted elsewhere.
func (n *node) cachedDirAttr(now time.Time) (nfs3.Fattr, time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := &n.ac
	if !c.valid || !c.ours || c.attr.Type != nfs3.TypeDir {
		return nfs3.Fattr{}, 0, false
	}
	left := c.timeo - now.Sub(c.at)
	if left <= 0 {
		return nfs3.Fattr{}, 0, false
	}
	return c.attr, left, true
}

func (n *node) lookupRPC(ctx context.Context, name string) (nfs3.FH, nfs3.Fattr, error) {
	res, err := n.sys.c.Lookup(ctx, n.fh, name)
	if err != nil {
		return nfs3.FH{}, nfs3.Fattr{}, err
	}
	if res.DirAttr.Set {
		n.refresh(&res.DirAttr.Attr)
	}
	if res.ObjAttr.Set {
		return res.Object, res.ObjAttr.Attr, nil
	}
	a, err := n.sys.c.Getattr(ctx, res.Object)
	return res.Object, a, err
}

// Lookup answers LOOKUP. The caller must have search permission on n
// (permit, from the access cache when fresh; EACCES), and name must fit
// the server's name_max (ENAMETOOLONG). It is answered from the
// READDIRPLUS entries of a recent listing (see plusTTL) when they have
// the name, with ENOENT when the directory's whole listing is known and
// lacks the name (dirnames.go), from the node the kernel has for the name
// while fresh (knownChild), else with an NFS LOOKUP. When n's handle is
// stale, the answer is ENOENT.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	if in := n.sys.adopt.lookup(name); in != nil {
		return in, 0 // a handover's restore (handover.go)
	}
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	defer func() {
		if errno == syscall.ESTALE {
			// n is gone: no name is in it, as a lookup in a removed
			// directory answers on Linux (IS_DEADDIR); ESTALE would
			// fail mkdir(2), symlink(2), mknod(2) and link(2), which
			// retry an ESTALE of the operation but not of the lookup
			// of its new name
			n.stale()
			errno = syscall.ENOENT
		}
	}()
	if errno := n.permit(ctx, mayExec); errno != 0 {
		return nil, errno
	}
	if len(name) > n.sys.nameMax {
		return nil, syscall.ENAMETOOLONG
	}
	now := time.Now()
	n.mu.Lock()
	e, ok := n.plus[name]
	if ok {
		delete(n.plus, name)
		n.sys.dirEntries.Add(-1)
		ok = now.Sub(n.plusAt) <= n.plusTTL()
	} else if n.absentLocked(name, now) {
		n.mu.Unlock()
		return nil, syscall.ENOENT // dirnames.go
	}
	n.mu.Unlock()
	if ok && e.Handle.Set && e.Attr.Set {
		return n.child(ctx, name, e.Handle.FH, &e.Attr.Attr, out), 0
	}
	if ch := n.knownChild(name, now, out); ch != nil {
		return ch, 0
	}
	fh, a, err := n.lookupRPC(ctx, name)
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, name, fh, &a, out), 0
}

// plusTTL is how long READDIRPLUS results answer LOOKUPs: acdirmin, or
// 100 ms with noac (long enough for the LOOKUPs of the same listing).
func (n *node) plusTTL() time.Duration {
	lo, _ := n.sys.o.DirTimeouts()
	return max(lo, 100*time.Millisecond)
}

// Getattr answers GETATTR with an NFS GETATTR, after the writes in flight
// of the file have reached the server (so size and mtime are current); a
// directory changed through this mount within its attribute timeout is
// answered from the change's wcc data (cachedDirAttr).
func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	if a, left, ok := n.cachedDirAttr(time.Now()); ok {
		fillAttr(&out.Attr, &a, n.sys.blksize)
		out.SetTimeout(left)
		return 0
	}
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	_ = n.waitWrites()
	a, err := n.sys.c.Getattr(ctx, n.fh)
	if err != nil {
		return toErrno(err)
	}
	timeo, _ := n.refresh(&a)
	fillAttr(&out.Attr, &a, n.sys.blksize)
	out.SetTimeout(timeo)
	return 0
}

// Setattr answers SETATTR (chmod, chown, truncate, utimes; "now" is the
// server's time) with one NFS SETATTR. A size change not made through an
// open file (truncate(2), and open(2) with O_TRUNC, which the kernel sends
// as OPEN then SETATTR) needs write permission (permit; EACCES), as
// Linux's vfs_truncate and may_open ask of the file system: the server
// lets the owner truncate without it (for ftruncate on a descriptor
// opened for writing).
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return syscall.EROFS
	}
	if in.Valid&fuse.FATTR_SIZE != 0 && fh == nil {
		if errno := n.permit(ctx, mayWrite); errno != 0 {
			return errno
		}
	}
	var s nfs3.Sattr
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		s.SetMode, s.Mode = true, in.Mode&0o7777
	}
	if v&fuse.FATTR_UID != 0 {
		s.SetUID, s.UID = true, in.Uid
	}
	if v&fuse.FATTR_GID != 0 {
		s.SetGID, s.GID = true, in.Gid
	}
	if v&fuse.FATTR_SIZE != 0 {
		s.SetSize, s.Size = true, in.Size
	}
	switch {
	case v&fuse.FATTR_ATIME_NOW != 0:
		s.Atime.How = nfs3.SetToServerTime
	case v&fuse.FATTR_ATIME != 0:
		s.Atime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: uint32(in.Atime), Nseconds: in.Atimensec}}
	}
	switch {
	case v&fuse.FATTR_MTIME_NOW != 0:
		s.Mtime.How = nfs3.SetToServerTime
	case v&fuse.FATTR_MTIME != 0:
		s.Mtime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: uint32(in.Mtime), Nseconds: in.Mtimensec}}
	}
	_ = n.waitWrites() // so that a truncate lands after the writes; errors are for flush
	res, err := n.sys.c.Setattr(ctx, n.fh, s, nfs3.SattrGuard{})
	if err != nil {
		return toErrno(err)
	}
	a := res.Wcc.After.Attr
	if !res.Wcc.After.Set {
		if a, err = n.sys.c.Getattr(ctx, n.fh); err != nil {
			return toErrno(err)
		}
	}
	timeo, _ := n.refresh(&a)
	fillAttr(&out.Attr, &a, n.sys.blksize)
	out.SetTimeout(timeo)
	return 0
}

// Readlink answers READLINK with NFS READLINK.
func (n *node) Readlink(ctx context.Context) (_ []byte, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	s, _, err := n.sys.c.Readlink(ctx, n.fh)
	if err != nil {
		return nil, toErrno(err)
	}
	return []byte(s), 0
}

// Statfs answers STATFS from NFS FSSTAT (block size 4 KiB).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	res, err := n.sys.c.Fsstat(ctx, n.fh)
	if err != nil {
		return toErrno(err)
	}
	const bs = 4096
	out.Bsize, out.Frsize, out.NameLen = bs, bs, uint32(n.sys.nameMax)
	out.Blocks, out.Bfree, out.Bavail = res.TBytes/bs, res.FBytes/bs, res.ABytes/bs
	out.Files, out.Ffree = res.TFiles, res.FFiles
	return 0
}

// Access answers ACCESS (access(2), chdir(2)) on a mount made without
// mountopts.KernelOptions (with default_permissions the kernel answers them from
// the mode bits and sends none): the permissions of mask (R_OK, W_OK,
// X_OK; F_OK is 0) are checked with permit, from the access cache when
// fresh, else with NFS ACCESS: the server decides. W_OK on a read-only
// mount is EROFS.
func (n *node) Access(ctx context.Context, mask uint32) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	may := mask & (mayRead | mayWrite | mayExec)
	if may&mayWrite != 0 && n.sys.o.ReadOnly {
		return syscall.EROFS
	}
	return n.permit(ctx, may)
}

// Extended attributes: NFSv3 has none.

// Getxattr answers ENOTSUP.
func (n *node) Getxattr(context.Context, string, []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// Setxattr answers ENOTSUP.
func (n *node) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.ENOTSUP
}

// Listxattr answers ENOTSUP.
func (n *node) Listxattr(context.Context, []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// Removexattr answers ENOTSUP.
func (n *node) Removexattr(context.Context, string) syscall.Errno {
	return syscall.ENOTSUP
}
