package fusefs

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Locks. With the FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS capabilities the
// kernel passes every fcntl and flock lock request to us (GETLK, SETLK,
// SETLKW; flock ones with FUSE_LK_FLOCK) and keeps none itself; so the
// locks an owner holds must also be dropped by us when it closes the
// file: POSIX locks at any FLUSH by their owner (the open-file table,
// FUSE lock_owner), flock locks at the RELEASE of their open file
// (FUSE_RELEASE_FLOCK_UNLOCK). As Linux NFS, locks go to the server with
// NLM (client.Locker), flock ones as whole-file POSIX locks of the open
// file (nfs_flock), unless local_lock keeps that kind in this mount
// (a table per file here; with local_lock=all or nolock the kernel keeps
// them, the capabilities not being announced).

// lockErrno maps a lock error to the errno Linux's NFS client returns
// (nlm_stat_to_errno, and ENOLCK when the lock service fails).
func lockErrno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, client.ErrLockDenied):
		return syscall.EAGAIN // EWOULDBLOCK for flock: the same number
	case errors.Is(err, client.ErrDeadlock):
		return syscall.EDEADLK
	case errors.Is(err, client.ErrLockROFS):
		return syscall.EROFS
	case errors.Is(err, client.ErrLockStale):
		return syscall.ESTALE
	case errors.Is(err, client.ErrLockRange):
		return syscall.EOVERFLOW
	case errors.Is(err, client.ErrLockInterrupted), errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	return syscall.ENOLCK
}

// localLocks are the locks local_lock keeps in this mount, per file.
type localLocks struct {
	mu    sync.Mutex
	posix map[*node]*posixlock.Table
	flock map[*node]*posixlock.Table
	pids  map[uint64]uint32 // owner -> the pid that locked (for GETLK)
}

func (l *localLocks) table(n *node, flock bool) *posixlock.Table {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := &l.posix
	if flock {
		m = &l.flock
	}
	if *m == nil {
		*m = map[*node]*posixlock.Table{}
	}
	t := (*m)[n]
	if t == nil {
		t = &posixlock.Table{}
		(*m)[n] = t
	}
	return t
}

func (l *localLocks) setPid(owner uint64, pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pids == nil {
		l.pids = map[uint64]uint32{}
	}
	l.pids[owner] = pid
}

func (l *localLocks) pid(owner uint64) uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pids[owner]
}

// isLocal reports whether locks of this kind (flock or POSIX) stay in
// this mount.
func (s *fsys) isLocal(flock bool) bool {
	if flock {
		return s.o.LocalFlock()
	}
	return s.o.LocalPosix()
}

// lockRange returns the inclusive range of lk (FUSE sends the kernel's
// file_lock: end OFFSET_MAX for "to the end of the file").
func lockRange(lk *fuse.FileLock) (uint64, uint64) {
	return lk.Start, min(lk.End, client.MaxLockOffset)
}

// Getlk answers GETLK (F_GETLK, F_OFD_GETLK) on the open file f: NLM
// TEST, or the local table. The conflicting lock's pid is the holder's
// svid, which is the holder's pid for this client's and Linux's locks
// (the kernel maps it into the caller's pid namespace, 0 when no such
// process is visible).
func (f *openFile) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.n.getlk(ctx, owner, lk, flags, out)
}

// getlk is Getlk: the locks are the inode's.
func (n *node) getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	flock := flags&fuse.FUSE_LK_FLOCK != 0
	start, end := lockRange(lk)
	excl := lk.Typ == syscall.F_WRLCK
	*out = fuse.FileLock{Typ: syscall.F_UNLCK}
	if lk.Typ == syscall.F_UNLCK {
		return 0
	}
	if n.sys.isLocal(flock) {
		if r, holder, ok := n.sys.local.table(n, flock).Conflict(owner, start, end, excl); ok {
			*out = fuse.FileLock{Start: r.Start, End: r.End, Typ: syscall.F_RDLCK, Pid: n.sys.local.pid(holder)}
			if r.Exclusive {
				out.Typ = syscall.F_WRLCK
			}
		}
		return 0
	}
	cctx, op := n.sys.call(ctx)
	defer op.done()
	h, err := n.sys.c.Locks().Test(n.sys.graceWait(cctx), n.lockReq(owner, lk))
	if err != nil {
		return lockErrno(err)
	}
	if h != nil {
		*out = fuse.FileLock{Start: h.Start, End: h.End, Typ: syscall.F_RDLCK}
		if h.Exclusive {
			out.Typ = syscall.F_WRLCK
		}
		if h.Svid > 0 {
			out.Pid = uint32(h.Svid)
		}
	}
	return 0
}

func (n *node) lockReq(owner uint64, lk *fuse.FileLock) client.LockRequest {
	start, end := lockRange(lk)
	return client.LockRequest{FH: n.fh, Owner: owner, Pid: lk.Pid, Start: start, End: end, Exclusive: lk.Typ == syscall.F_WRLCK}
}

// Setlk answers SETLK (F_SETLK, flock with LOCK_NB, and unlocks) on the
// open file f: NLM LOCK without blocking or UNLOCK, or the local table.
func (f *openFile) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	f.noteLockOwner(owner, lk)
	return f.n.setlk(ctx, owner, lk, flags, false)
}

// Setlkw answers SETLKW (F_SETLKW, flock without LOCK_NB) on the open
// file f: NLM LOCK that blocks until the lock is granted or the caller is
// interrupted (a signal: FUSE_INTERRUPT), which cancels the request and
// answers EINTR (the kernel restarts the call for a handler with
// SA_RESTART).
func (f *openFile) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	f.noteLockOwner(owner, lk)
	return f.n.setlk(ctx, owner, lk, flags, true)
}

// noteLockOwner records that owner locks through f, whose RELEASE then
// drops what the owner still holds (lockOwnerList).
func (f *openFile) noteLockOwner(owner uint64, lk *fuse.FileLock) {
	if lk.Typ == syscall.F_UNLCK {
		return
	}
	f.sh.mu.Lock()
	defer f.sh.mu.Unlock()
	if f.lockOwners == nil {
		f.lockOwners = map[uint64]bool{}
	}
	f.lockOwners[owner] = true
}

// lockOwnerList returns the owners that locked through f. At its RELEASE
// every descriptor of it is closed, so each POSIX owner among them
// already dropped its locks at the FLUSH of its close; what is left are
// the open file description locks (F_OFD_SETLK), which the kernel leaves
// to us: their owner is the open file, and it is gone.
func (f *openFile) lockOwnerList() []uint64 {
	f.sh.mu.Lock()
	defer f.sh.mu.Unlock()
	var out []uint64
	for o := range f.lockOwners {
		out = append(out, o)
	}
	return out
}

// setlk is Setlk (wait false) and Setlkw (wait true): the locks are the
// inode's, held by owner.
func (n *node) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	flock := flags&fuse.FUSE_LK_FLOCK != 0
	start, end := lockRange(lk)
	excl := lk.Typ == syscall.F_WRLCK
	if lk.Typ != syscall.F_UNLCK && lk.Typ != syscall.F_RDLCK && lk.Typ != syscall.F_WRLCK {
		return syscall.EINVAL
	}
	if n.sys.isLocal(flock) {
		t := n.sys.local.table(n, flock)
		switch {
		case lk.Typ == syscall.F_UNLCK:
			t.Unlock(owner, start, end)
		case !wait:
			if !t.TryLock(owner, start, end, excl) {
				return syscall.EAGAIN
			}
		default:
			wctx, stop := waitContext(ctx, n.sys.bg)
			defer stop()
			if err := t.Lock(wctx, owner, start, end, excl); err != nil {
				return syscall.EINTR
			}
		}
		if lk.Typ != syscall.F_UNLCK {
			n.sys.local.setPid(owner, lk.Pid)
		}
		return 0
	}
	req := n.lockReq(owner, lk)
	cctx, op := n.sys.call(ctx)
	defer op.done()
	// as Linux's do_unlk and do_setlk: the writes made under a lock
	// reach the server before it is released, and those made under
	// another client's lock are read after ours is granted
	_ = n.waitWrites()
	if lk.Typ == syscall.F_UNLCK {
		uctx := cctx
		if !wait {
			// a SETLK, counted by the gate (an unlock may come as
			// SETLKW too: flock(LOCK_UN), F_SETLKW with F_UNLCK)
			uctx = n.sys.graceWait(cctx)
		}
		return lockErrno(n.sys.c.Locks().Unlock(uctx, req))
	}
	var err error
	if !wait {
		err = n.sys.c.Locks().Lock(n.sys.graceWait(cctx), req, false)
	} else {
		wctx, stop := waitContext(ctx, n.sys.bg)
		defer stop()
		if cred, _ := n.sys.as(ctx); cred != nil {
			wctx = client.WithCred(wctx, cred)
		}
		err = n.sys.c.Locks().Lock(wctx, req, true)
	}
	if err == nil {
		n.dropCaches()
	}
	return lockErrno(err)
}

// graceWait returns ctx whose lock calls, while they wait out the
// server's grace period, are not waited for by a handover's drain
// (gate.pause): for the counted requests (all but SETLKW) whose lock
// call may be given up and asked again of a successor.
func (s *fsys) graceWait(ctx context.Context) context.Context {
	if s.gate == nil {
		return ctx
	}
	return client.WithGraceWait(ctx, &s.gate.graceWait)
}

// releaseGraceWait is graceWait for the unlocks at the RELEASE rel,
// which the kernel cannot send again usefully to a successor (the open
// file is gone from go-fuse's table before the unlock): while such an
// unlock of owner on fh waits out the grace period it is recorded in
// s.unlocks, which a handover carries (the successor unlocks, and keeps
// the file handle's number taken until the RELEASE sent again frees it).
func (s *fsys) releaseGraceWait(ctx context.Context, fh nfs3.FH, owner uint64, rel releaseOwner) context.Context {
	if s.gate == nil {
		return ctx
	}
	u := pendingUnlock{fh: string(fh.Bytes()), owner: owner, handle: rel.fh, node: rel.node}
	return client.WithGraceWait(ctx, &client.GraceWait{
		Wait: func() {
			s.unlocks.add(u)
			s.gate.pause()
		},
		Resume: func() {
			s.gate.resume() // held, carried, if the mount is handed over
			s.unlocks.remove(u)
		},
	})
}

// pendingUnlock is an unlock at a RELEASE waiting out the server's grace
// period: the lock owner on a file handle.
type pendingUnlock struct {
	fh           string // nfs3.FH bytes
	owner        uint64
	handle, node uint64 // the RELEASE's file handle and nodeid
}

// pendingUnlocks are the unlocks at a RELEASE waiting out the server's
// grace period, each with how many wait.
type pendingUnlocks struct {
	mu sync.Mutex
	m  map[pendingUnlock]int
}

func (p *pendingUnlocks) add(u pendingUnlock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[pendingUnlock]int{}
	}
	p.m[u]++
}

func (p *pendingUnlocks) remove(u pendingUnlock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[u]--; p.m[u] <= 0 {
		delete(p.m, u)
	}
}

// list returns the unlocks waiting.
func (p *pendingUnlocks) list() []pendingUnlock {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]pendingUnlock, 0, len(p.m))
	for u := range p.m {
		out = append(out, u)
	}
	return out
}

// dropCaches makes the next reads of n go to the server: its cached
// attributes and the kernel's pages of it are dropped.
func (n *node) dropCaches() {
	n.mu.Lock()
	n.ac.valid = false
	n.mu.Unlock()
	n.NotifyContent(0, 0)
}

// waitContext returns a context for a lock wait: cancelled at once when
// the FUSE request is interrupted (a signal to the caller; no grace as
// for other calls: nothing is lost by cancelling a wait) or the mount
// ends.
func waitContext(req context.Context, bg context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(bg)
	if req.Done() == nil {
		return ctx, cancel
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-req.Done():
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() {
		close(stop)
		cancel()
	}
}

// dropLocks releases what owner holds on n at a close: its POSIX locks
// at a FLUSH (any close of the file by the owner), or its flock lock at
// the RELEASE of its open file.
func (n *node) dropLocks(ctx context.Context, owner uint64, flock bool) {
	if n.sys.isLocal(flock) {
		n.sys.local.table(n, flock).Unlock(owner, 0, client.MaxLockOffset)
		return
	}
	if n.sys.o.LocalFlock() && n.sys.o.LocalPosix() {
		return
	}
	if err := n.sys.c.Locks().UnlockOwner(ctx, n.fh, owner); err != nil {
		klog.ErrorS(err, "fusefs: unlock at close failed", "fh", n.fh.String(), "owner", owner, "flock", flock)
	}
}

// lockOwners passes the lock_owner of FLUSH and RELEASE requests, which
// go-fuse's node and file APIs do not carry, from the raw requests to the
// open file's Flush and Release: each in-flight request has its own
// cancel channel, which is the Done channel of the context the open
// file's method gets.
type lockOwners struct {
	fuse.RawFileSystem
	m sync.Map // <-chan struct{} -> releaseOwner
}

type releaseOwner struct {
	owner uint64
	flock bool // RELEASE with FUSE_RELEASE_FLOCK_UNLOCK
	// fh and node are a RELEASE's file handle and nodeid.
	fh, node uint64
}

// Flush records in.LockOwner for the open file's Flush.
func (r *lockOwners) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	r.m.Store(cancel, releaseOwner{owner: in.LockOwner})
	defer r.m.Delete(cancel)
	return r.RawFileSystem.Flush(cancel, in)
}

// Release records the flock owner, if any, and the file handle for the
// open file's Release.
func (r *lockOwners) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	ro := releaseOwner{fh: in.Fh, node: in.NodeId}
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		ro.owner, ro.flock = in.LockOwner, true
	}
	r.m.Store(cancel, ro)
	defer r.m.Delete(cancel)
	r.RawFileSystem.Release(cancel, in)
}

// ownerOf returns the lock owner recorded for the request of ctx.
func (r *lockOwners) ownerOf(ctx context.Context) (releaseOwner, bool) {
	if r == nil || ctx.Done() == nil {
		return releaseOwner{}, false
	}
	v, ok := r.m.Load(ctx.Done())
	if !ok {
		return releaseOwner{}, false
	}
	return v.(releaseOwner), true
}
