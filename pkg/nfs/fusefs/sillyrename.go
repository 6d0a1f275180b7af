package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Silly rename, as Linux's NFS client (fs/nfs/unlink.c): NFSv3 has no
// open state, so a server frees a file at its last REMOVE even while a
// client still has it open, and every later READ or WRITE through that
// descriptor would get NFS3ERR_STALE. Unlinking a file that is open
// through this mount (and has no other link) therefore renames it to a
// hidden name in the same directory, ".nfs" + 16 hex digits of the file id
// + 8 of a counter, and REMOVEs that name at the last close (RELEASE). The
// hidden name shows in listings meanwhile, as on Linux, and a directory
// holding one cannot be removed (ENOTEMPTY). A rename over an open target
// renames the target away first, the same way.

// silly is where an open, unlinked file was renamed to.
type silly struct {
	dir  *node
	name string
	cred *client.Cred // the unlinker's: the final REMOVE is theirs
}

// opened counts an open of n (OPEN, CREATE).
func (n *node) opened() {
	n.mu.Lock()
	n.opens++
	n.mu.Unlock()
}

// released counts a RELEASE of n; at the last one, the hidden name of a
// silly-renamed n is removed.
func (n *node) released(ctx context.Context) {
	n.mu.Lock()
	n.opens--
	var s *silly
	if n.opens == 0 && n.silly != nil {
		s, n.silly = n.silly, nil
	}
	n.mu.Unlock()
	if s != nil {
		s.remove(ctx, n.sys.c)
	}
}

// remove REMOVEs the hidden name, as the unlinker; a failure leaves the
// file (logged), as Linux does.
func (s *silly) remove(ctx context.Context, c *client.Client) {
	res, err := c.Remove(client.WithCred(ctx, s.cred), s.dir.fh, s.name)
	if err != nil {
		klog.InfoS("fusefs: REMOVE of a silly-renamed file at its last close failed; it stays", "dir", s.dir.fh.String(), "name", s.name, "err", err)
		return
	}
	s.dir.afterDirChange(&res.DirWcc, "", s.name)
}

// sillyRename renames name in directory n away to a hidden name when it is
// an open file of this mount with a single link, and returns its node (nil
// when it did not: the caller removes or replaces name as usual). A hidden
// name whose file is still open is not removed: syscall.EBUSY, as Linux.
// A GETATTR that fails (the file gone from the server meanwhile) leaves
// the name to the caller's plain REMOVE or RENAME. Errors are the
// RENAME's.
func (n *node) sillyRename(ctx context.Context, name string) (*node, error) {
	ch := n.GetChild(name)
	if ch == nil {
		return nil, nil
	}
	cn, ok := ch.Operations().(*node)
	if !ok {
		return nil, nil
	}
	cn.mu.Lock()
	opens, was := cn.opens, cn.silly
	cn.mu.Unlock()
	if opens == 0 {
		return nil, nil
	}
	if was != nil {
		if was.dir == n && was.name == name {
			return nil, syscall.EBUSY // the hidden name itself, still open
		}
		return nil, nil
	}
	a, err := n.sys.c.Getattr(ctx, cn.fh)
	if err != nil {
		return nil, nil // stale or unreachable: the caller's call says
	}
	if a.Type == nfs3.TypeDir || a.Nlink > 1 {
		return nil, nil // another name keeps the file
	}
	hidden := fmt.Sprintf(".nfs%016x%08x", a.FileID, n.sys.sillyCount.Add(1))
	res, err := n.sys.c.Rename(ctx, n.fh, name, n.fh, hidden)
	if err != nil {
		return nil, err
	}
	n.afterDirChange(&res.ToDirWcc, hidden, name)
	s := &silly{dir: n, name: hidden, cred: client.CredFrom(ctx)}
	cn.mu.Lock()
	closed := cn.opens == 0 // the last RELEASE came meanwhile
	if !closed {
		cn.silly = s
	}
	cn.mu.Unlock()
	if closed {
		// no RELEASE will remove it: put the name back and let the
		// caller's REMOVE or RENAME run as for a closed file
		if _, err := n.sys.c.Rename(ctx, n.fh, hidden, n.fh, name); err != nil {
			return nil, err
		}
		return nil, nil
	}
	return cn, nil
}

// unsilly undoes sillyRename of cn (renamed away from name in n) after
// the operation it made room for failed: best effort.
func (n *node) unsilly(ctx context.Context, cn *node, name string) {
	cn.mu.Lock()
	s := cn.silly
	cn.silly = nil
	cn.mu.Unlock()
	if s == nil {
		return
	}
	if _, err := n.sys.c.Rename(ctx, n.fh, s.name, n.fh, name); err != nil {
		klog.InfoS("fusefs: could not rename a silly-renamed file back", "dir", n.fh.String(), "from", s.name, "to", name, "err", err)
		cn.mu.Lock()
		cn.silly = s
		cn.mu.Unlock()
	}
}

// sillyErrno maps an error of sillyRename: its own EBUSY as is, the
// RENAME's as every NFS error.
func sillyErrno(err error) syscall.Errno {
	if errors.Is(err, syscall.EBUSY) {
		return syscall.EBUSY
	}
	return toErrno(err)
}
