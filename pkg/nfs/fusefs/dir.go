package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// afterDirChange notes that directory n changed through us: the reply's
// wcc data refreshes its attributes (or its cached attributes are no
// longer trusted), and its known names follow the change (dirnames.go):
// add and del are the names it added and removed ("" for none).
func (n *node) afterDirChange(wcc *nfs3.WccData, add, del string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.followLocked(wcc, add, del)
	if wcc.After.Set {
		n.refreshLocked(&wcc.After.Attr)
		n.ac.ours = true
		return
	}
	n.ac.valid = false
}

// objAttrs returns the handle and attributes of a created object,
// looking them up when the reply lacks them.
func (n *node) objAttrs(ctx context.Context, name string, res nfs3.CreateRes) (nfs3.FH, nfs3.Fattr, error) {
	if res.Obj.Set && res.ObjAttr.Set {
		return res.Obj.FH, res.ObjAttr.Attr, nil
	}
	return n.lookupRPC(ctx, name)
}

// Create answers CREATE: NFS CREATE, GUARDED with O_EXCL (EEXIST if the
// name exists), UNCHECKED otherwise (O_TRUNC then truncates an existing
// file), and opens the file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	how := nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: mode & 0o7777}}
	if flags&syscall.O_EXCL != 0 {
		how.Mode = nfs3.Guarded
	}
	res, err := n.sys.c.Create(ctx, n.fh, name, how)
	if err != nil {
		return nil, nil, 0, n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, name, "")
	fh, a, err := n.objAttrs(ctx, name, res)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 && a.Size != 0 {
		if a, err = n.sys.c.Truncate(ctx, fh, 0); err != nil {
			return nil, nil, 0, toErrno(err)
		}
	}
	ch := n.child(ctx, name, fh, &a, out)
	return ch, ch.Operations().(*node).open(false), 0, 0
}

// Mkdir answers MKDIR with NFS MKDIR.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return nil, syscall.EROFS
	}
	res, err := n.sys.c.Mkdir(ctx, n.fh, name, nfs3.Sattr{SetMode: true, Mode: mode & 0o7777})
	if err != nil {
		return nil, n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, name, "")
	fh, a, err := n.objAttrs(ctx, name, res)
	if err != nil {
		return nil, toErrno(err)
	}
	ch := n.child(ctx, name, fh, &a, out)
	if cn := ch.Operations().(*node); res.Obj.Set && res.ObjAttr.Set && cn.fh == fh {
		// the attributes of the MKDIR reply are those of the new,
		// empty directory (dirnames.go)
		cn.madeEmpty(&res.ObjAttr.Attr)
	}
	return ch, 0
}

// Mknod answers MKNOD (FIFO, socket, character and block devices) with
// NFS MKNOD; a regular file goes through CREATE.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return nil, syscall.EROFS
	}
	attr := nfs3.Sattr{SetMode: true, Mode: mode & 0o7777}
	var res nfs3.CreateRes
	var err error
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		res, err = n.sys.c.Create(ctx, n.fh, name, nfs3.CreateHow{Mode: nfs3.Guarded, Attr: attr})
	case syscall.S_IFIFO:
		res, err = n.sys.c.Mknod(ctx, n.fh, name, nfs3.TypeFIFO, attr, nfs3.SpecData{})
	case syscall.S_IFSOCK:
		res, err = n.sys.c.Mknod(ctx, n.fh, name, nfs3.TypeSock, attr, nfs3.SpecData{})
	case syscall.S_IFCHR, syscall.S_IFBLK:
		t := nfs3.TypeChr
		if mode&syscall.S_IFMT == syscall.S_IFBLK {
			t = nfs3.TypeBlk
		}
		spec := nfs3.SpecData{Major: (dev >> 8) & 0xfff, Minor: (dev & 0xff) | (dev>>12)&^0xff}
		res, err = n.sys.c.Mknod(ctx, n.fh, name, t, attr, spec)
	default:
		return nil, syscall.EINVAL
	}
	if err != nil {
		return nil, n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, name, "")
	fh, a, err := n.objAttrs(ctx, name, res)
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, name, fh, &a, out), 0
}

// Symlink answers SYMLINK with NFS SYMLINK.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return nil, syscall.EROFS
	}
	res, err := n.sys.c.Symlink(ctx, n.fh, name, target, nfs3.Sattr{})
	if err != nil {
		return nil, n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, name, "")
	fh, a, err := n.objAttrs(ctx, name, res)
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, name, fh, &a, out), 0
}

// Link answers LINK with NFS LINK; the new name shares target's inode.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return nil, syscall.EROFS
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	res, err := n.sys.c.Link(ctx, t.fh, n.fh, name)
	if err != nil {
		if errno = n.changeFailed(err); errno == syscall.ESTALE {
			t.stale() // or n (node.call): which one, the reply does not say
		}
		return nil, errno
	}
	n.afterDirChange(&res.LinkDirWcc, name, "")
	a := res.FileAttr.Attr
	if !res.FileAttr.Set {
		if a, err = n.sys.c.Getattr(ctx, t.fh); err != nil {
			return nil, toErrno(err)
		}
	}
	return n.child(ctx, name, t.fh, &a, out), 0
}

// Unlink answers UNLINK with NFS REMOVE, or, for a file open through
// this mount, with a silly rename (sillyrename.go).
func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return syscall.EROFS
	}
	if cn, err := n.sillyRename(ctx, name); err != nil {
		return sillyErrno(err)
	} else if cn != nil {
		return 0 // removed at its last close
	}
	res, err := n.sys.c.Remove(ctx, n.fh, name)
	if err != nil {
		return n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, "", name)
	return 0
}

// Rmdir answers RMDIR with NFS RMDIR.
func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return syscall.EROFS
	}
	res, err := n.sys.c.Rmdir(ctx, n.fh, name)
	if err != nil {
		return n.changeFailed(err)
	}
	n.afterDirChange(&res.DirWcc, "", name)
	return 0
}

// Rename answers RENAME with NFS RENAME (replacing an existing target, as
// rename(2)); renameat2 flags are refused with EINVAL, as Linux NFSv3 does.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly {
		return syscall.EROFS
	}
	if flags != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	// an open target is renamed away first (sillyrename.go), unless it
	// is the source itself (rename of a link onto the same file)
	var tgt *node
	if src, dst := n.GetChild(name), np.GetChild(newName); dst != nil && src != dst {
		var err error
		if tgt, err = np.sillyRename(ctx, newName); err != nil {
			return sillyErrno(err)
		}
	}
	res, err := n.sys.c.Rename(ctx, n.fh, name, np.fh, newName)
	if err != nil {
		if tgt != nil {
			np.unsilly(ctx, tgt, newName)
		}
		np.forgetNames()
		if errno = n.changeFailed(err); errno == syscall.ESTALE {
			np.stale() // or n (node.call): which one, the reply does not say
		}
		return errno
	}
	if np == n {
		// one change of one directory: both wcc_data are of it
		n.afterDirChange(&res.FromDirWcc, newName, name)
		return 0
	}
	n.afterDirChange(&res.FromDirWcc, "", name)
	np.afterDirChange(&res.ToDirWcc, newName, "")
	return 0
}
