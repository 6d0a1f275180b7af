package fuseuring

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// slowName is the directory whose MKDIR slowFS holds.
const slowName = "slow"

// slowFS holds the MKDIRs of slowName until released (each counted), and,
// when armed, the next FORGET: the read loop serves FORGETs itself, so
// that holds its next read of /dev/fuse.
type slowFS struct {
	fuse.RawFileSystem
	mkdirs  atomic.Int32
	entered chan struct{} // a MKDIR of slowName is held
	release chan struct{} // closed: held MKDIRs go on

	// interrupt: a held MKDIR answers EINTR when interrupted once
	// honor is set; early records an interrupt before (then it waits
	// for release).
	interrupt   bool
	honor       atomic.Bool
	early       atomic.Bool
	interrupted chan struct{}

	holdForget    atomic.Bool
	forgetHeld    chan struct{}
	forgetRelease chan struct{}
	releaseOnce   sync.Once
	forgetOnce    sync.Once
}

func (f *slowFS) releaseMkdirs() { f.releaseOnce.Do(func() { close(f.release) }) }
func (f *slowFS) releaseForget() { f.forgetOnce.Do(func() { close(f.forgetRelease) }) }

func newSlowFS() *slowFS {
	return &slowFS{entered: make(chan struct{}, 4), release: make(chan struct{}), interrupted: make(chan struct{}, 1),
		forgetHeld: make(chan struct{}), forgetRelease: make(chan struct{})}
}

func (f *slowFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if name == slowName {
		f.mkdirs.Add(1)
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-cancel:
			if !f.interrupt || !f.honor.Load() {
				f.early.Store(f.interrupt)
				<-f.release
				break
			}
			f.interrupted <- struct{}{}
			return fuse.EINTR
		}
	}
	return f.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (f *slowFS) Forget(nodeid, nlookup uint64) {
	if f.holdForget.CompareAndSwap(true, false) {
		close(f.forgetHeld)
		<-f.forgetRelease
	}
	f.RawFileSystem.Forget(nodeid, nlookup)
}

// mountSlow mounts a loopback served over /dev/fuse through a slowFS,
// tracking its requests from now on (a server that answered INIT, whose
// requests are all its own) unless untracked: Resend then starts
// tracking.
func mountSlow(t *testing.T) (string, string, *Server, *slowFS) {
	t.Helper()
	dir, back, srv, f := mountSlowUntracked(t)
	srv.trackResends(true)
	return dir, back, srv, f
}

// mountSlowUntracked is mountSlow without tracking.
func mountSlowUntracked(t *testing.T) (string, string, *Server, *slowFS) {
	t.Helper()
	f := newSlowFS()
	dir, back, srv := mountWrapped(t, Config{}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		f.RawFileSystem = raw
		return f
	})
	t.Cleanup(func() {
		f.holdForget.Store(false)
		f.releaseMkdirs()
		f.releaseForget()
	})
	return dir, back, srv, f
}

// startMkdir runs mkdir(2) of dir/slowName in a goroutine on a thread of
// its own, returning that thread's id and the call's error channel, once
// slowFS holds the MKDIR.
func startMkdir(t *testing.T, dir string, f *slowFS) (int, chan error) {
	t.Helper()
	tid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		tid <- unix.Gettid()
		done <- unix.Mkdir(filepath.Join(dir, slowName), 0o755)
	}()
	select {
	case <-f.entered:
	case err := <-done:
		t.Fatalf("mkdir returned %v before the file system held it", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the MKDIR did not reach the file system")
	}
	return <-tid, done
}

// waitFor polls cond every millisecond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitForTracker waits up to 10 s for srv to drop tr, once its copies
// are read and its requests answered.
func waitForTracker(t *testing.T, srv *Server, tr *resendTracker) {
	t.Helper()
	if tr == nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); srv.resends.Load() == tr; {
		if time.Now().After(deadline) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			t.Fatalf("tracker not dropped after 10 s: sent %v, draining %v, in flight %v, awaiting %v, kept %d, %+v",
				tr.sent.Load(), tr.draining.Load(), tr.inflight, tr.awaiting, len(tr.kept), tr.st)
		}
		time.Sleep(time.Millisecond)
	}
}

func mkdirResult(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("mkdir still waiting 10 s after its answer")
		return nil
	}
}

// mkdirOnce checks that the mkdir(2) whose result done gives succeeded,
// that the file system handled one MKDIR, and that the directory is in
// the backing directory parent: a resent MKDIR was not handled again
// (which answers EEXIST).
func mkdirOnce(t *testing.T, done chan error, f *slowFS, parent string) {
	t.Helper()
	if err := mkdirResult(t, done); err != nil {
		t.Fatalf("mkdir: %v (the resent MKDIR was handled again)", err)
	}
	if n := f.mkdirs.Load(); n != 1 {
		t.Errorf("%d MKDIRs handled, want 1", n)
	}
	if fi, err := os.Stat(filepath.Join(parent, slowName)); err != nil || !fi.IsDir() {
		t.Errorf("backing directory: %v", err)
	}
}

// A MKDIR this server is handling when it asks the kernel to resend: the
// kernel's copy (FUSE_UNIQUE_RESEND) is not handled again, the handler's
// reply answers it: mkdir(2) succeeds, with one MKDIR handled.
func TestResendJoinsRequestInFlight(t *testing.T) {
	dir, back, srv, f := mountSlow(t)
	_, done := startMkdir(t, dir, f)
	if err := srv.Resend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "copy joined", func() bool { return srv.ResendStats().Joined >= 1 })
	f.releaseMkdirs()
	mkdirOnce(t, done, f, back)
	// the copies are read: the next requests end tracking
	for i := range 3 {
		_ = os.WriteFile(filepath.Join(dir, "after"+string(rune('0'+i))), nil, 0o600)
	}
	waitFor(t, "tracker dropped", func() bool { return srv.resends.Load() == nil })
	// Joined and Replayed may count copies of other requests in flight
	// at the resend, which any process of the machine may have made
	// (seen once in 14 runs beside other tests), answered by their
	// requests' replies too; the MKDIR count shows the MKDIR was not
	// handled twice.
	if st := srv.ResendStats(); st.Joined < 1 || st.Handled != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v, want the MKDIR joined, none handled or dropped", st)
	}
}

// The window before tracking: a MKDIR read by a server that tracks
// nothing yet, and so not registered, is in flight when the server asks
// the kernel to resend (Resend starts tracking). Its copy is found
// neither in flight nor kept; every request of the connection being this
// server's, it is joined to the MKDIR, whose reply (refused under the
// old unique) answers it: mkdir(2) succeeds with one MKDIR handled. A
// server that handled such a copy gave mkdir(2) EEXIST.
func TestResendJoinsRequestReadBeforeTracking(t *testing.T) {
	dir, back, srv, f := mountSlowUntracked(t)
	_, done := startMkdir(t, dir, f)
	if srv.resends.Load() != nil {
		t.Fatal("tracking before the resend")
	}
	if err := srv.Resend(); err != nil {
		t.Fatal(err)
	}
	// the copy read: joined, or (the window open) handled as a MKDIR
	waitFor(t, "copy read", func() bool { return srv.ResendStats().Joined >= 1 || f.mkdirs.Load() > 1 })
	f.releaseMkdirs()
	mkdirOnce(t, done, f, back)
	tr := srv.resends.Load()
	waitForTracker(t, srv, tr)
	if st := srv.ResendStats(); st.Handled != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v, want no copy handled nor reply dropped", st)
	}
}

// The window before tracking, the reply first: the untracked MKDIR's
// reply is written between the resend and the reading of its copy (the
// reader held in a FORGET); refused, it is kept and answers the copy.
func TestResendReplaysUntrackedReply(t *testing.T) {
	replaysRefusedReply(t, mountSlowUntracked)
}

// The handler's reply written between the kernel's resend and this
// server's reading of the copy: the kernel refuses it (ENOENT, the
// request is pending again under the resent unique); the reply is kept
// and answers the copy, re-stamped. The read loop is held in a FORGET
// (served by the reader itself) while the reply is written, so the order
// is the one of the race, on a real kernel connection.
func TestResendReplaysRefusedReply(t *testing.T) {
	replaysRefusedReply(t, mountSlow)
}

// replaysRefusedReply holds an MKDIR of a mount made by mount, resends
// while the read loop is held in a FORGET, lets the MKDIR's reply go (the
// kernel refuses it) and then the read loop: the kept reply answers the
// copy, the MKDIR is handled once.
func replaysRefusedReply(t *testing.T, mount func(*testing.T) (string, string, *Server, *slowFS)) {
	dir, back, srv, f := mount(t)
	// the MKDIR holds its parent's lock: the file to unlink is elsewhere
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, done := startMkdir(t, filepath.Join(dir, "sub"), f)
	// a FORGET to hold the reader in: the inode of an unlinked file
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatal(err)
	}
	f.holdForget.Store(true)
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.forgetHeld:
	case <-time.After(10 * time.Second):
		t.Fatal("no FORGET of the unlinked file")
	}
	if err := srv.Resend(); err != nil {
		t.Fatal(err)
	}
	f.releaseMkdirs() // the MKDIR's reply: refused, kept
	tr := srv.resends.Load()
	waitFor(t, "reply kept", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.kept) == 1
	})
	f.releaseForget() // the reader reads the copy
	mkdirOnce(t, done, f, filepath.Join(back, "sub"))
	if st := srv.ResendStats(); st.Replayed < 1 || st.Handled != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v, want one replayed", st)
	}
}

// An INTERRUPT of a joined copy names the copy's unique: it reaches the
// handler of the request in flight, whose EINTR answers the copy.
func TestResendInterruptOfJoinedCopy(t *testing.T) {
	dir, _, srv, f := mountSlow(t)
	f.interrupt = true
	tid, done := startMkdir(t, dir, f)
	if err := srv.Resend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "copy joined", func() bool { return srv.ResendStats().Joined >= 1 })
	f.honor.Store(true)
	if f.early.Load() {
		t.Skip("a signal interrupted the MKDIR before the resend")
	}
	// any signal the thread handles makes the kernel send INTERRUPT
	if err := unix.Tgkill(os.Getpid(), tid, unix.SIGURG); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.interrupted:
	case <-time.After(5 * time.Second):
		t.Fatal("the INTERRUPT of the resent MKDIR did not reach its handler")
	}
	if err := mkdirResult(t, done); !errors.Is(err, syscall.EINTR) {
		t.Fatalf("mkdir: %v, want EINTR", err)
	}
	if n := f.mkdirs.Load(); n != 1 {
		t.Errorf("%d MKDIRs handled, want 1", n)
	}
}

// The tracker's bookkeeping, without a kernel: copies join the request
// in flight or take its kept reply; the first request that is no copy,
// read after the notification, ends tracking and drops what is kept;
// after that a request costs no allocation.
func TestResendTrackerDrains(t *testing.T) {
	tr := newResendTracker(false)
	if act, _ := tr.read(10, false); act != readTracked {
		t.Fatalf("request before the resend: %v, want tracked", act)
	}
	if act, _ := tr.read(12, false); act != readTracked {
		t.Fatalf("request before the resend: %v, want tracked", act)
	}
	tr.sent.Store(true)
	if act, _ := tr.read(10|resendBit, true); act != readJoined || tr.inflight[10].reply != 10|resendBit {
		t.Fatalf("copy of a request in flight: %v %+v, want joined", act, tr.inflight[10])
	}
	reply := make([]byte, outHdrSize)
	tr.kept[14] = reply
	tr.keptBytes = len(reply)
	if act, r := tr.read(14|resendBit, true); act != readReplay || len(r) != outHdrSize || binary.LittleEndian.Uint64(r[8:]) != 14|resendBit {
		t.Fatalf("copy of a request answered: %v %x, want its reply re-stamped", act, r)
	}
	if act, _ := tr.read(20|resendBit, true); act != readTracked || tr.inflight[20].as != 20|resendBit {
		t.Fatalf("copy of another process's request: %v, want handled and tracked", act)
	}
	tr.kept[16] = reply // a reply whose copy never comes
	if act, _ := tr.read(30, true); act != readUntracked || !tr.draining.Load() || len(tr.kept) != 0 {
		t.Fatalf("first request after the copies: %v, draining %v, %d kept", act, tr.draining.Load(), len(tr.kept))
	}
	if st := tr.stats(); st != (ResendStats{Joined: 1, Replayed: 1, Handled: 1, Dropped: 1}) {
		t.Errorf("stats %+v", st)
	}
	if n := testing.AllocsPerRun(100, func() { tr.read(40, true) }); n != 0 {
		t.Errorf("%v allocations a request after tracking ended", n)
	}
}
