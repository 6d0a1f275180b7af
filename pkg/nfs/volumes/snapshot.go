package volumes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// maxSnapshotID bounds a snapshot id, in bytes.
const maxSnapshotID = 128

// jobRunner runs the snapshot and clone copies in the background, at most
// cap(sem) at once.
type jobRunner struct {
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex // orders start against stop
	stopped bool
	wg      sync.WaitGroup
	sem     chan struct{}
	pending []func() // queued by init, run by startPending under Registry.mu
	pace    func()   // tests: slows copies down (see treeCopier.pace)
}

func (j *jobRunner) init(n int) {
	if n <= 0 {
		n = 2
	}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	j.sem = make(chan struct{}, n)
}

// startPending starts what New queued: interrupted copies and
// deletions.
func (j *jobRunner) startPending(r *Registry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range j.pending {
		f()
	}
	j.pending = nil
}

// stop cancels every job and waits for them.
func (j *jobRunner) stop() {
	j.mu.Lock()
	j.stopped = true
	if j.cancel != nil {
		j.cancel()
	}
	j.mu.Unlock()
	j.wg.Wait()
}

// add counts a new job's goroutine; false once stop was called (the job
// then stays unfinished, to start again with the next New).
func (j *jobRunner) add() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.stopped {
		return false
	}
	j.wg.Add(1)
	return true
}

// copyJob is the progress of one copy.
type copyJob struct {
	total, copied atomic.Int64 // bytes

	// set when started, under Registry.mu
	cancel context.CancelFunc
	done   chan struct{} // closed when the copy's goroutine has ended
	// guarded by Registry.mu
	ready bool
	err   string
}

func newCopyJob(total, copied int64) *copyJob {
	j := &copyJob{}
	j.total.Store(total)
	j.copied.Store(copied)
	return j
}

func (j *copyJob) finish(errMsg string) { j.ready, j.err = errMsg == "", errMsg }

// finishErr ends the job with err (nil: ready).
func (j *copyJob) finishErr(err error) {
	if err != nil {
		j.finish(err.Error())
	} else {
		j.finish("")
	}
}

// cancelAndWait stops the copy, if it runs, and waits for its end. Call
// it without Registry.mu.
func (j *copyJob) cancelAndWait() {
	if j.cancel != nil {
		j.cancel()
		<-j.done
	}
}

// start runs work in the background as job j (r.mu held). When it ends,
// done is called with r.mu held and work's error, unless the registry is
// closing (the copy is then left unfinished, to start again on the next
// New).
func (r *Registry) start(j *copyJob, what string, work func(ctx context.Context) error, done func(err error)) {
	ctx, cancel := context.WithCancel(r.jobs.ctx)
	j.cancel, j.done = cancel, make(chan struct{})
	if !r.jobs.add() {
		cancel()
		close(j.done)
		return
	}
	go func() {
		defer r.jobs.wg.Done()
		defer close(j.done)
		defer cancel()
		var err error
		select {
		case r.jobs.sem <- struct{}{}:
			klog.InfoS("volumes: copy started", "job", what, "totalBytes", j.total.Load())
			err = work(ctx)
			<-r.jobs.sem
		case <-ctx.Done():
			err = ctx.Err()
		}
		if r.jobs.ctx.Err() != nil {
			klog.InfoS("volumes: copy interrupted by shutdown; it starts again with the registry", "job", what)
			return
		}
		r.mu.Lock()
		done(err)
		r.mu.Unlock()
		if err != nil {
			klog.ErrorS(err, "volumes: copy failed", "job", what, "copiedBytes", j.copied.Load())
		} else {
			klog.InfoS("volumes: copy done", "job", what, "copiedBytes", j.copied.Load())
		}
	}()
}

// snapRec is a snapshot in the registry.
type snapRec struct {
	admin.Snapshot // ID, Source, CreatedAt
	job            *copyJob
	deleting       bool // guarded by Registry.mu
}

// info returns the snapshot with its progress (Registry.mu held).
func (rec *snapRec) info() admin.Snapshot {
	s := rec.Snapshot
	s.SourceMeta = maps.Clone(s.SourceMeta)
	s.SizeBytes, s.CopiedBytes = rec.job.total.Load(), rec.job.copied.Load()
	s.Ready, s.Error = rec.job.ready, rec.job.err
	if s.Ready {
		s.SizeBytes = max(s.SizeBytes, s.CopiedBytes)
	}
	return s
}

func checkSnapshotID(id string) error {
	if id == "" || len(id) > maxSnapshotID || id == "." || id == ".." {
		return fmt.Errorf("%w: snapshot id %q: want 1 to %d characters of [A-Za-z0-9._-]", admin.ErrInvalid, id, maxSnapshotID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: snapshot id %q: want 1 to %d characters of [A-Za-z0-9._-]", admin.ErrInvalid, id, maxSnapshotID)
		}
	}
	return nil
}

// CreateSnapshot starts copying registered volume source into snapshot
// id (a directory of the snapshot directory, out of every NFS client's
// reach), or returns the snapshot id of the same source as it stands
// (copying, ready or failed). Errors wrap admin.ErrInvalid (bad id or
// path), admin.ErrExists (id taken by another source), admin.ErrNotFound
// (source not registered), admin.ErrPrecondition (no snapshot directory
// configured, the volume's directory missing, or id being deleted), or
// are internal (state file).
func (r *Registry) CreateSnapshot(id, source string) (admin.Snapshot, error) {
	if err := checkSnapshotID(id); err != nil {
		return admin.Snapshot{}, err
	}
	src, err := volumePath(source)
	if err != nil {
		return admin.Snapshot{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.snaps[id]; rec != nil {
		switch {
		case rec.Source != src:
			return admin.Snapshot{}, fmt.Errorf("%w: snapshot %q is of volume %q, not %q", admin.ErrExists, id, rec.Source, src)
		case rec.deleting:
			return admin.Snapshot{}, fmt.Errorf("%w: snapshot %q is being deleted", admin.ErrPrecondition, id)
		}
		return rec.info(), nil
	}
	if r.snapDir == "" {
		return admin.Snapshot{}, fmt.Errorf("%w: the server has no snapshot directory (--state-dir or --snapshot-dir)", admin.ErrPrecondition)
	}
	v := r.vols[src]
	if v == nil {
		return admin.Snapshot{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, src)
	}
	if v.dir == nil {
		return admin.Snapshot{}, fmt.Errorf("%w: the directory of volume %q is missing", admin.ErrPrecondition, src)
	}
	rec := &snapRec{Snapshot: admin.Snapshot{ID: id, Source: src, SourceMeta: maps.Clone(v.meta), CreatedAt: now()}, job: newCopyJob(0, 0)}
	r.snaps[id] = rec
	if err := r.saveLocked(); err != nil {
		delete(r.snaps, id)
		return admin.Snapshot{}, err
	}
	r.startSnapshotLocked(rec, false)
	klog.InfoS("volumes: snapshot created", "snapshot", id, "volume", src)
	return rec.info(), nil
}

// startSnapshotLocked starts (or, after a restart, starts again from
// scratch) the copy of snapshot rec. r.mu is held.
func (r *Registry) startSnapshotLocked(rec *snapRec, again bool) {
	dst := filepath.Join(r.snapDir, rec.ID)
	r.start(rec.job, "snapshot "+rec.ID, func(ctx context.Context) error {
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		return r.copyInto(ctx, rec.job, func() (*os.File, error) { return openDirBeneath(r.rootFD, rec.Source) }, dst, nil)
	}, func(err error) {
		if r.snaps[rec.ID] != rec || rec.deleting {
			return
		}
		rec.job.finishErr(err)
		if err := r.saveLocked(); err != nil {
			klog.ErrorS(err, "volumes: saving the state after a snapshot copy", "snapshot", rec.ID)
		}
	})
	if again {
		klog.InfoS("volumes: snapshot copy restarted", "snapshot", rec.ID, "volume", rec.Source)
	}
}

// copyInto copies the tree opened by openSrc into directory dst (open it
// with openDst, or by path when openDst is nil), with progress in j: the
// source is walked first for the total.
func (r *Registry) copyInto(ctx context.Context, j *copyJob, openSrc func() (*os.File, error), dst string, openDst func() (*os.File, error)) error {
	src, err := openSrc()
	if err != nil {
		return err
	}
	u, err := dirUsage(ctx, src)
	src.Close()
	if err != nil {
		return err
	}
	j.total.Store(u.size)
	j.copied.Store(0)
	if src, err = openSrc(); err != nil {
		return err
	}
	defer src.Close()
	var d *os.File
	if openDst != nil {
		d, err = openDst()
	} else {
		d, err = openDirAt(unix.AT_FDCWD, dst)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return copyTree(ctx, src, d, &j.copied, r.jobs.pace)
}

// Snapshot returns snapshot id with its progress; admin.ErrNotFound when
// unknown (or being deleted), admin.ErrInvalid for a bad id.
func (r *Registry) Snapshot(id string) (admin.Snapshot, error) {
	if err := checkSnapshotID(id); err != nil {
		return admin.Snapshot{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.snaps[id]
	if rec == nil || rec.deleting {
		return admin.Snapshot{}, fmt.Errorf("%w: snapshot %q", admin.ErrNotFound, id)
	}
	return rec.info(), nil
}

// Snapshots returns every snapshot (not being deleted), sorted by id.
func (r *Registry) Snapshots() []admin.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]admin.Snapshot, 0, len(r.snaps))
	for _, rec := range r.snaps {
		if !rec.deleting {
			out = append(out, rec.info())
		}
	}
	slices.SortFunc(out, func(a, b admin.Snapshot) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// DeleteSnapshot cancels snapshot id's copy if it runs, removes its tree
// and forgets it; the deletion is recorded first, so that a restart
// finishes it. Idempotent: nil when unknown. Errors wrap admin.ErrInvalid
// (bad id), admin.ErrPrecondition (a clone is being filled from it: the
// CSI "snapshot in use"), or are internal (state file, removal).
func (r *Registry) DeleteSnapshot(id string) error {
	if err := checkSnapshotID(id); err != nil {
		return err
	}
	r.mu.Lock()
	rec := r.snaps[id]
	if rec == nil || rec.deleting {
		r.mu.Unlock()
		return nil
	}
	for _, c := range r.clones {
		if c.FromSnapshot == id && !c.job.ready && c.job.err == "" {
			r.mu.Unlock()
			return fmt.Errorf("%w: snapshot %q is in use: volume %q is being filled from it", admin.ErrPrecondition, id, c.Dest)
		}
	}
	rec.deleting = true
	if err := r.saveLocked(); err != nil {
		rec.deleting = false
		r.mu.Unlock()
		return err
	}
	r.mu.Unlock()
	return r.finishDelete(rec)
}

// finishDelete stops snapshot rec's copy, removes its tree and forgets it.
// Call it without r.mu.
func (r *Registry) finishDelete(rec *snapRec) error {
	rec.job.cancelAndWait()
	if err := os.RemoveAll(filepath.Join(r.snapDir, rec.ID)); err != nil {
		return fmt.Errorf("volumes: snapshot %q: %w", rec.ID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snaps[rec.ID] == rec {
		delete(r.snaps, rec.ID)
	}
	if err := r.saveLocked(); err != nil {
		return err
	}
	klog.InfoS("volumes: snapshot deleted", "snapshot", rec.ID, "volume", rec.Source)
	return nil
}

// cloneRec is a clone job in the registry, keyed by destination.
type cloneRec struct {
	admin.Clone        // Dest, FromSnapshot, FromVolume
	dev, ino    uint64 // the destination directory it fills
	job         *copyJob
}

// info returns the clone with its progress (Registry.mu held).
func (rec *cloneRec) info() admin.Clone {
	c := rec.Clone
	c.SizeBytes, c.CopiedBytes = rec.job.total.Load(), rec.job.copied.Load()
	c.Ready, c.Error = rec.job.ready, rec.job.err
	if c.Ready {
		c.SizeBytes = max(c.SizeBytes, c.CopiedBytes)
	}
	return c
}

// statBeneath returns the stat of directory rel beneath the root.
func (r *Registry) statBeneath(rel string) (unix.Stat_t, bool, error) {
	var st unix.Stat_t
	d, err := openDirBeneath(r.rootFD, rel)
	if err != nil {
		var en unix.Errno
		if errors.As(err, &en) && (en == unix.ENOENT || en == unix.ENOTDIR || en == unix.ELOOP || en == unix.EXDEV) {
			return st, false, nil
		}
		return st, false, err
	}
	defer d.Close()
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return st, false, err
	}
	if _, err := d.Readdirnames(1); err != io.EOF {
		return st, true, err // not empty (err nil), or a read error
	}
	return st, true, io.EOF
}

// CreateClone starts filling directory cl.Dest (relative to the root; it
// must exist and be empty) from snapshot cl.FromSnapshot or volume
// cl.FromVolume (exactly one), or returns the job filling cl.Dest from
// the same source. It registers nothing; when the destination is a
// registered volume at the end of the copy, its usage is counted again.
// Errors wrap admin.ErrInvalid (no or two sources, bad path, a volume
// cloned into itself), admin.ErrNotFound (unknown snapshot or volume),
// admin.ErrPrecondition (destination missing or not empty, snapshot not
// ready or failed), admin.ErrExists (another source fills cl.Dest), or
// are internal.
func (r *Registry) CreateClone(cl admin.Clone) (admin.Clone, error) {
	dest, err := volumePath(cl.Dest)
	if err != nil {
		return admin.Clone{}, err
	}
	if (cl.FromSnapshot == "") == (cl.FromVolume == "") {
		return admin.Clone{}, fmt.Errorf("%w: clone of %q: want exactly one of fromSnapshot and fromVolume", admin.ErrInvalid, dest)
	}
	want := admin.Clone{Dest: dest, FromSnapshot: cl.FromSnapshot}
	if cl.FromSnapshot != "" {
		if err := checkSnapshotID(cl.FromSnapshot); err != nil {
			return admin.Clone{}, err
		}
	} else {
		if want.FromVolume, err = volumePath(cl.FromVolume); err != nil {
			return admin.Clone{}, err
		}
		if within(dest, want.FromVolume) || within(want.FromVolume, dest) {
			return admin.Clone{}, fmt.Errorf("%w: clone of volume %q into %q: one contains the other", admin.ErrInvalid, want.FromVolume, dest)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st, exists, serr := r.statBeneath(dest)
	if rec := r.clones[dest]; rec != nil {
		if exists && st.Dev == rec.dev && st.Ino == rec.ino {
			if rec.FromSnapshot != want.FromSnapshot || rec.FromVolume != want.FromVolume {
				return admin.Clone{}, fmt.Errorf("%w: %q is being filled from another source (snapshot %q, volume %q)", admin.ErrExists, dest, rec.FromSnapshot, rec.FromVolume)
			}
			return rec.info(), nil
		}
		// the directory was replaced: the old job is stale
		if rec.job.cancel != nil {
			rec.job.cancel()
		}
		delete(r.clones, dest)
	}
	switch {
	case !exists && serr == nil:
		return admin.Clone{}, fmt.Errorf("%w: clone destination %q: no such directory", admin.ErrPrecondition, dest)
	case serr == nil:
		return admin.Clone{}, fmt.Errorf("%w: clone destination %q is not empty", admin.ErrPrecondition, dest)
	case serr != io.EOF:
		return admin.Clone{}, fmt.Errorf("volumes: clone destination %q: %w", dest, serr)
	}
	if want.FromSnapshot != "" {
		sr := r.snaps[want.FromSnapshot]
		switch {
		case sr == nil || sr.deleting:
			return admin.Clone{}, fmt.Errorf("%w: snapshot %q", admin.ErrNotFound, want.FromSnapshot)
		case sr.job.err != "":
			return admin.Clone{}, fmt.Errorf("%w: snapshot %q failed: %s", admin.ErrPrecondition, want.FromSnapshot, sr.job.err)
		case !sr.job.ready:
			return admin.Clone{}, fmt.Errorf("%w: snapshot %q is not ready (%d of %d bytes copied)", admin.ErrPrecondition, want.FromSnapshot, sr.job.copied.Load(), sr.job.total.Load())
		}
	} else {
		v := r.vols[want.FromVolume]
		if v == nil {
			return admin.Clone{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, want.FromVolume)
		}
	}
	rec := &cloneRec{Clone: want, dev: st.Dev, ino: st.Ino, job: newCopyJob(0, 0)}
	r.clones[dest] = rec
	if err := r.saveLocked(); err != nil {
		delete(r.clones, dest)
		return admin.Clone{}, err
	}
	r.startCloneLocked(rec, false)
	klog.InfoS("volumes: clone created", "dest", dest, "fromSnapshot", want.FromSnapshot, "fromVolume", want.FromVolume)
	return rec.info(), nil
}

// startCloneLocked starts the copy of clone rec; again (after a restart)
// empties the destination first. r.mu is held.
func (r *Registry) startCloneLocked(rec *cloneRec, again bool) {
	openSrc := func() (*os.File, error) { return openDirBeneath(r.rootFD, rec.FromVolume) }
	if rec.FromSnapshot != "" {
		p := filepath.Join(r.snapDir, rec.FromSnapshot)
		openSrc = func() (*os.File, error) { return openDirAt(unix.AT_FDCWD, p) }
	}
	openDst := func() (*os.File, error) {
		d, err := openDirBeneath(r.rootFD, rec.Dest)
		if err != nil {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(d.Fd()), &st); err != nil || st.Dev != rec.dev || st.Ino != rec.ino {
			d.Close()
			return nil, fmt.Errorf("clone destination %q was replaced", rec.Dest)
		}
		return d, nil
	}
	r.start(rec.job, "clone "+rec.Dest, func(ctx context.Context) error {
		if again {
			d, err := openDst()
			if err != nil {
				return err
			}
			err = removeContents(d)
			d.Close()
			if err != nil {
				return err
			}
		}
		if err := r.copyInto(ctx, rec.job, openSrc, "", openDst); err != nil {
			return err
		}
		r.mu.Lock()
		v := r.vols[rec.Dest]
		r.mu.Unlock()
		if v != nil {
			return r.recount(v, rec.Dest)
		}
		return nil
	}, func(err error) {
		if r.clones[rec.Dest] != rec {
			return
		}
		rec.job.finishErr(err)
		if err := r.saveLocked(); err != nil {
			klog.ErrorS(err, "volumes: saving the state after a clone copy", "dest", rec.Dest)
		}
	})
	if again {
		klog.InfoS("volumes: clone copy restarted", "dest", rec.Dest)
	}
}

// Clone returns the clone job of destination dest with its progress;
// admin.ErrNotFound when there is none, admin.ErrInvalid for a bad path.
func (r *Registry) Clone(dest string) (admin.Clone, error) {
	dest, err := volumePath(dest)
	if err != nil {
		return admin.Clone{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.clones[dest]
	if rec == nil {
		return admin.Clone{}, fmt.Errorf("%w: no clone into %q", admin.ErrNotFound, dest)
	}
	return rec.info(), nil
}
