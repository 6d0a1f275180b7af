package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
)

// gate stands between the FUSE server and the file system so that a
// handover (handover.go) can stop the mount's requests:
//   - closed, a request that arrives is held, unanswered, until the gate
//     opens again (a failed handover) or the process exits (the kernel
//     then sends it again to the successor, FUSE_NOTIFY_RESEND);
//   - frozen, a request that finishes is held the same way, unanswered:
//     what the successor was told is final (a SETLKW granted after the
//     state was taken is asked again by the resent request).
//
// Requests in flight are counted, SETLKW apart: a blocked lock may wait
// for ever, so a handover does not wait for it; nor for a counted request
// while it waits out the NFS server's grace period in a lock call
// (pause): if the gate closes meanwhile, the request is held when it
// would go on (resume), given up as the requests held at the gate are,
// and asked again of the successor by the kernel.
type gate struct {
	fuse.RawFileSystem

	mu       sync.Mutex
	cond     sync.Cond
	closed   bool
	frozen   bool
	inflight int           // requests in the file system, SETLKW and paused apart
	paused   int           // requests paused (pause), held if the gate closes
	open     chan struct{} // closed when the gate opens again
	held     atomic.Int64  // requests held at the gate (requests carried)

	// graceWait pauses the counted request whose lock call waits out the
	// server's grace period (client.WithGraceWait).
	graceWait client.GraceWait

	// rec, when set, records the kernel's nodeids and handles as they are
	// answered (statemap.go); clamp, when set, bounds each FORGET to
	// go-fuse's lookup count, which a restore after a crash sets to one
	// (the kernel's counts died with the process).
	rec   atomic.Pointer[stateMap]
	clamp atomic.Pointer[goFuseTable]
}

func newGate(fs fuse.RawFileSystem) *gate {
	g := &gate{RawFileSystem: fs, open: make(chan struct{})}
	g.cond.L = &g.mu
	g.graceWait = client.GraceWait{Wait: g.pause, Resume: g.resume}
	return g
}

// pause takes a counted request out of the requests close waits for,
// while it waits for something that may last (a lock call in the
// server's grace period); it counts as held meanwhile.
func (g *gate) pause() {
	g.mu.Lock()
	g.inflight--
	g.paused++
	g.cond.Broadcast()
	g.mu.Unlock()
}

// resume counts a paused request in flight again, holding it first,
// unanswered, while the gate is closed.
func (g *gate) resume() {
	g.mu.Lock()
	g.paused--
	for g.closed {
		ch := g.open
		g.held.Add(1)
		g.mu.Unlock()
		<-ch
		g.held.Add(-1)
		g.mu.Lock()
	}
	g.inflight++
	g.mu.Unlock()
}

// enter admits a request, or holds it while the gate is closed.
func (g *gate) enter(counted bool) {
	g.mu.Lock()
	for g.closed {
		ch := g.open
		g.mu.Unlock()
		g.held.Add(1)
		<-ch
		g.held.Add(-1)
		g.mu.Lock()
	}
	if counted {
		g.inflight++
	}
	g.mu.Unlock()
}

// leave ends a request, or holds it (unanswered) while frozen.
func (g *gate) leave(counted bool) {
	g.mu.Lock()
	if counted {
		g.inflight--
		g.cond.Broadcast()
	}
	for g.frozen {
		ch := g.open
		g.mu.Unlock()
		g.held.Add(1)
		<-ch
		g.held.Add(-1)
		g.mu.Lock()
	}
	g.mu.Unlock()
}

// close stops admitting requests and waits until those in flight (but
// SETLKW) have ended, or ctx ends (the gate stays closed: reopen).
func (g *gate) close(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	for g.inflight > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.cond.Wait()
	}
	return nil
}

// freeze holds every answer from now on.
func (g *gate) freeze() {
	g.mu.Lock()
	g.frozen = true
	g.mu.Unlock()
}

// reopen lets the held requests and answers go on: the handover failed.
func (g *gate) reopen() {
	g.mu.Lock()
	g.closed, g.frozen = false, false
	close(g.open)
	g.open = make(chan struct{})
	g.mu.Unlock()
}

// holding returns how many requests the gate holds, paused ones
// included.
func (g *gate) holding() int64 {
	g.mu.Lock()
	p := g.paused
	g.mu.Unlock()
	return g.held.Load() + int64(p)
}

// entered records the node of an answer that made an entry (LOOKUP,
// MKNOD, MKDIR, LINK, SYMLINK) when st is OK; it returns st.
func (g *gate) entered(st fuse.Status, out *fuse.EntryOut) fuse.Status {
	if st.Ok() {
		g.rec.Load().node(out.NodeId)
	}
	return st
}

// opened records the file handle fh of node nodeID that an answer opened
// (CREATE, TMPFILE, OPEN) when st is OK, read-only if the open(2) flags
// say O_RDONLY; it returns st.
func (g *gate) opened(st fuse.Status, fh, nodeID uint64, flags uint32) fuse.Status {
	if st.Ok() {
		g.rec.Load().open(fh, nodeID, false, flags&syscall.O_ACCMODE == syscall.O_RDONLY)
	}
	return st
}

func (g *gate) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.entered(g.RawFileSystem.Lookup(cancel, header, name, out), out)
}

func (g *gate) Forget(nodeid, nlookup uint64) {
	g.enter(true)
	defer g.leave(true)
	if t := g.clamp.Load(); t != nil {
		nlookup = min(nlookup, t.lookupCount(nodeid))
		if nlookup == 0 {
			return
		}
	}
	g.RawFileSystem.Forget(nodeid, nlookup)
}

func (g *gate) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.GetAttr(cancel, input, out)
}

func (g *gate) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.SetAttr(cancel, input, out)
}

func (g *gate) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.entered(g.RawFileSystem.Mknod(cancel, input, name, out), out)
}

func (g *gate) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.entered(g.RawFileSystem.Mkdir(cancel, input, name, out), out)
}

func (g *gate) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Unlink(cancel, header, name)
}

func (g *gate) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Rmdir(cancel, header, name)
}

func (g *gate) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Rename(cancel, input, oldName, newName)
}

func (g *gate) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.entered(g.RawFileSystem.Link(cancel, input, filename, out), out)
}

func (g *gate) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.entered(g.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out), out)
}

func (g *gate) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Readlink(cancel, header)
}

func (g *gate) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Access(cancel, input)
}

func (g *gate) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.GetXAttr(cancel, header, attr, dest)
}

func (g *gate) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.ListXAttr(cancel, header, dest)
}

func (g *gate) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.SetXAttr(cancel, input, attr, data)
}

func (g *gate) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.RemoveXAttr(cancel, header, attr)
}

func (g *gate) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	st := g.RawFileSystem.Create(cancel, input, name, out)
	return g.opened(st, out.Fh, out.NodeId, input.Flags)
}

func (g *gate) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	st := g.RawFileSystem.Tmpfile(cancel, input, out)
	return g.opened(st, out.Fh, out.NodeId, input.Flags)
}

func (g *gate) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	st := g.RawFileSystem.Open(cancel, input, out)
	return g.opened(st, out.Fh, input.NodeId, input.Flags)
}

func (g *gate) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Read(cancel, input, buf)
}

func (g *gate) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Lseek(cancel, in, out)
}

func (g *gate) GetLk(cancel <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.GetLk(cancel, input, out)
}

func (g *gate) SetLk(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.SetLk(cancel, input)
}

// SetLkw is not counted in flight: a blocked lock may wait for ever.
func (g *gate) SetLkw(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	g.enter(false)
	defer g.leave(false)
	return g.RawFileSystem.SetLkw(cancel, input)
}

func (g *gate) Release(cancel <-chan struct{}, input *fuse.ReleaseIn) {
	g.enter(true)
	defer g.leave(true)
	g.RawFileSystem.Release(cancel, input)
	g.rec.Load().release(input.Fh)
}

func (g *gate) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Write(cancel, input, data)
}

func (g *gate) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Writev(cancel, input, data)
}

func (g *gate) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.CopyFileRange(cancel, input)
}

func (g *gate) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf)
}

func (g *gate) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Flush(cancel, input)
}

func (g *gate) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Fsync(cancel, input)
}

func (g *gate) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Fallocate(cancel, input)
}

func (g *gate) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	st := g.RawFileSystem.OpenDir(cancel, input, out)
	if st.Ok() {
		g.rec.Load().open(out.Fh, input.NodeId, true, true)
	}
	return st
}

func (g *gate) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.ReadDir(cancel, input, out)
}

func (g *gate) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	st := g.RawFileSystem.ReadDirPlus(cancel, input, out)
	if st.Ok() {
		g.rec.Load().direntplus(out.Bytes())
	}
	return st
}

func (g *gate) ReleaseDir(input *fuse.ReleaseIn) {
	g.enter(true)
	defer g.leave(true)
	g.RawFileSystem.ReleaseDir(input)
	g.rec.Load().release(input.Fh)
}

func (g *gate) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.FsyncDir(cancel, input)
}

func (g *gate) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.StatFs(cancel, input, out)
}

func (g *gate) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	g.enter(true)
	defer g.leave(true)
	return g.RawFileSystem.Statx(cancel, input, out)
}
