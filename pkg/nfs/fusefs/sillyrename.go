package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
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

// released counts the RELEASE of f; at the last open file of the inode,
// the hidden name of a silly-renamed file is removed.
func (f *openFile) released(ctx context.Context) {
	sh := f.sh
	sh.mu.Lock()
	sh.opens--
	f.n.sys.opens.Add(-1)
	f.setFlushedLocked(false)
	sh.wakeLocked()
	var s *silly
	if sh.opens == 0 && sh.silly != nil {
		s, sh.silly = sh.silly, nil
	}
	sh.mu.Unlock()
	if s != nil {
		s.remove(ctx, f.n.sys.c)
	}
}

// readStart and readDone count a READ of the inode in progress: the
// kernel holds the RELEASE of a closed file until the read-ahead READs of
// it are answered (awaitRelease).
func (sh *sharedFile) readStart() {
	sh.mu.Lock()
	sh.reads++
	sh.mu.Unlock()
}

func (sh *sharedFile) readDone() {
	sh.mu.Lock()
	sh.reads--
	sh.readEnd = time.Now()
	sh.wakeLocked()
	sh.mu.Unlock()
}

// wakeLocked wakes awaitRelease. sh.mu is held.
func (sh *sharedFile) wakeLocked() {
	if sh.rel != nil {
		close(sh.rel)
		sh.rel = nil
	}
}

// ReleaseWait bounds how long an unlink or a rename over a file waits
// for the RELEASEs of its open files when every one of them was flushed
// (closed) since its last write (openFile.setFlushed). A program that
// closes a file and then removes it, or removes its directory (rm -rf),
// would otherwise see a silly rename, and ENOTEMPTY from rmdir, when the
// unlink overtakes the RELEASE. The kernel holds the RELEASE until the
// READs of the file in progress (read-ahead) are answered, so the wait
// lasts while they are, up to ReleaseWaitMax. An open file whose close we
// saw but that is still open (a descriptor dup(2)ed or inherited, or a
// mapping) costs that wait at unlink, then the silly rename as before.
const (
	ReleaseWait    = 50 * time.Millisecond
	ReleaseWaitMax = 2 * time.Second
)

// awaitRelease waits while the inode has open files and every one of them
// is closing, until ReleaseWait has passed with no READ of it in
// progress, at most ReleaseWaitMax (or until ctx ends); never on the
// thread of a ring queue (fuseuring.OnQueueThread). It returns the number
// of open files left.
func (sh *sharedFile) awaitRelease(ctx context.Context) int {
	start := time.Now()
	long := time.NewTimer(ReleaseWaitMax)
	defer long.Stop()
	var short *time.Timer
	defer func() {
		if short != nil {
			short.Stop()
		}
	}()
	for {
		sh.mu.Lock()
		opens := sh.opens
		if opens == 0 || sh.closed < opens || fuseuring.OnQueueThread() {
			// On a ring queue's thread (an unlink answersAlone took
			// while no file was open) the RELEASE may sit in this
			// queue behind us: not waited for, as if it came late.
			sh.mu.Unlock()
			return opens
		}
		var shortC <-chan time.Time
		if sh.reads == 0 {
			quiet := start
			if sh.readEnd.After(quiet) {
				quiet = sh.readEnd
			}
			left := ReleaseWait - time.Since(quiet)
			if left <= 0 {
				sh.mu.Unlock()
				return opens
			}
			if short == nil {
				short = time.NewTimer(left)
			} else {
				short.Reset(left)
			}
			shortC = short.C
		}
		if sh.rel == nil {
			sh.rel = make(chan struct{})
		}
		rel := sh.rel
		sh.mu.Unlock()
		select {
		case <-rel:
		case <-shortC:
		case <-long.C:
			return opens
		case <-ctx.Done():
			return opens
		}
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
	sh := cn.shared.Load()
	if sh == nil {
		return nil, nil // never opened
	}
	sh.mu.Lock()
	opens, was := sh.opens, sh.silly
	sh.mu.Unlock()
	if opens > 0 && was == nil {
		opens = sh.awaitRelease(ctx)
	}
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
		n.forgetNames() // as changeFailed
		return nil, err
	}
	n.afterDirChange(&res.ToDirWcc, hidden, name)
	s := &silly{dir: n, name: hidden, cred: client.CredFrom(ctx)}
	sh.mu.Lock()
	closed := sh.opens == 0 // the last RELEASE came meanwhile
	if !closed {
		sh.silly = s
	}
	sh.mu.Unlock()
	if closed {
		// no RELEASE will remove it: put the name back and let the
		// caller's REMOVE or RENAME run as for a closed file
		back, err := n.sys.c.Rename(ctx, n.fh, hidden, n.fh, name)
		if err != nil {
			n.forgetNames() // as changeFailed
			return nil, err
		}
		n.afterDirChange(&back.ToDirWcc, name, hidden)
		return nil, nil
	}
	return cn, nil
}

// unsilly undoes sillyRename of cn (renamed away from name in n) after
// the operation it made room for failed: best effort.
func (n *node) unsilly(ctx context.Context, cn *node, name string) {
	sh := cn.shared.Load()
	if sh == nil {
		return
	}
	sh.mu.Lock()
	s := sh.silly
	sh.silly = nil
	sh.mu.Unlock()
	if s == nil {
		return
	}
	back, err := n.sys.c.Rename(ctx, n.fh, s.name, n.fh, name)
	if err != nil {
		klog.InfoS("fusefs: could not rename a silly-renamed file back", "dir", n.fh.String(), "from", s.name, "to", name, "err", err)
		n.forgetNames()
		sh.mu.Lock()
		sh.silly = s
		sh.mu.Unlock()
		return
	}
	n.afterDirChange(&back.ToDirWcc, name, s.name)
}

// sillyErrno maps an error of sillyRename: its own EBUSY as is, the
// RENAME's as every NFS error.
func sillyErrno(err error) syscall.Errno {
	if errors.Is(err, syscall.EBUSY) {
		return syscall.EBUSY
	}
	return toErrno(err)
}
