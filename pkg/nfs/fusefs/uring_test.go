package fusefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// enableMu serializes the tests that set the fuse module's enable_uring.
var enableMu sync.Mutex

// setEnableURing sets the fuse module's enable_uring for the test and
// restores it after; it skips without it.
func setEnableURing(t testing.TB, on bool) {
	t.Helper()
	old, err := os.ReadFile(fuseuring.EnableParam)
	if err != nil {
		t.Skip("kernel without FUSE over io_uring:", err)
	}
	v := "0"
	if on {
		v = "1"
	}
	enableMu.Lock()
	if err := os.WriteFile(fuseuring.EnableParam, []byte(v), 0); err != nil {
		enableMu.Unlock()
		t.Skip("cannot set enable_uring:", err)
	}
	t.Cleanup(func() {
		prev := "0"
		if strings.TrimSpace(string(old)) == "Y" {
			prev = "1"
		}
		_ = os.WriteFile(fuseuring.EnableParam, []byte(prev), 0)
		enableMu.Unlock()
	})
}

// uringMount mounts a new server's export over TCP with fuse_uring=opt
// while the kernel's enable_uring is enable, and fails the test unless the
// mount's FUSE transport is want.
func uringMount(t *testing.T, enable bool, opt, want string) (*testServer, string, *Mount) {
	t.Helper()
	needFUSE(t)
	setEnableURing(t, enable)
	srv := startServer(t)
	dir, m := srv.mount(t, mountopts.ProtoTCP, "fuse_uring="+opt)
	if st := m.FUSETransport(); st.Transport != want {
		t.Fatalf("fuse_uring=%s, enable_uring %v: transport %+v, want %s", opt, enable, st, want)
	}
	return srv, dir, m
}

// TestFUSEOverIOURing runs the core of the file system tests (files,
// names, directories) on a mount with fuse_uring=on, counting the
// requests answered over the ring so that the test cannot pass over
// /dev/fuse.
func TestFUSEOverIOURing(t *testing.T) {
	srv, dir, m := uringMount(t, true, "on", fuseuring.TransportIOURing)
	st0 := m.FUSETransport()
	testFiles(t, dir, srv.root)
	testNamespace(t, dir, srv.root)
	testReaddir(t, dir, m, 300)
	testMisc(t, dir)
	st := m.FUSETransport()
	if n := st.RingRequests - st0.RingRequests; n < 500 {
		t.Errorf("%d requests over the ring, want at least 500 (%+v)", n, st)
	}
	t.Logf("%+v", st)
}

// TestFUSEURingFallback: with the kernel's enable_uring off, fuse_uring=auto
// mounts over /dev/fuse and fuse_uring=on fails with ErrUnavailable.
func TestFUSEURingFallback(t *testing.T) {
	srv, dir, _ := uringMount(t, false, "auto", fuseuring.TransportDevFUSE)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mo, err := mountopts.Parse("proto=tcp,fuse_uring=on,port=" + strconv.Itoa(srv.nfsPort) + ",mountport=" + strconv.Itoa(srv.mountPort))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir2 := t.TempDir()
	m2, err := NewMount(ctx, dir2, Config{Source: "127.0.0.1:/", Options: mo, AuthSys: sunrpc.AuthSysParams{MachineName: "fusefs-test"}})
	if err == nil {
		cleanupMount(t, dir2, m2)
		t.Fatal("fuse_uring=on mounted without the kernel's io_uring")
	}
	if !errors.Is(err, fuseuring.ErrUnavailable) || !strings.Contains(err.Error(), "fuse_uring=on") {
		t.Errorf("fuse_uring=on: %v, want ErrUnavailable naming the option", err)
	}
	if mounted(t, dir2) {
		t.Error("fuse_uring=on left a mount behind")
	}
}

// TestURingUnlinkWithoutOpenFiles: over the ring, an unlink while no file
// of the mount is open is answered on the queue's thread (not offloaded
// to a goroutine), one while a file is open is offloaded, and a file
// closed and at once unlinked is removed, not silly-renamed. (Here the
// RELEASE comes before the UNLINK: this part passes without
// awaitRelease's wait too; it guards against a silly rename, not the
// wait.)
func TestURingUnlinkWithoutOpenFiles(t *testing.T) {
	srv, dir, m := uringMount(t, true, "on", fuseuring.TransportIOURing)
	released := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for m.sys.opens.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d open files not released after 5 s", m.sys.opens.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	create := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// offloadedBy returns how many requests op sent to a goroutine.
	offloadedBy := func(op func()) uint64 {
		t.Helper()
		before := m.FUSETransport().Offloaded
		op()
		return m.FUSETransport().Offloaded - before
	}
	unlink := func(name string) func() {
		return func() {
			t.Helper()
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}

	create("a")
	released()
	if n := offloadedBy(unlink("a")); n != 0 {
		t.Errorf("unlink with no file open: %d requests offloaded, want 0", n)
	}

	create("b")
	f, err := os.Open(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	create("c")
	if n := offloadedBy(unlink("c")); n == 0 {
		t.Error("unlink with a file open: answered on the queue's thread, want offloaded")
	}
	f.Close()

	// Closed and unlinked at once, many times over: never a hidden name
	// (a silly rename would be removed again at the RELEASE; it is
	// counted).
	silly := m.sys.sillyCount.Load()
	for i := range 50 {
		name := "d" + strconv.Itoa(i)
		create(name)
		unlink(name)()
	}
	if n := m.sys.sillyCount.Load() - silly; n != 0 {
		t.Errorf("%d of 50 files closed and then unlinked were silly-renamed, want 0", n)
	}
	unlink("b")()
	released()
	ents, err := os.ReadDir(srv.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left on the server: %s", e.Name())
	}
}

// unlinkProbe runs probe before each UNLINK it passes on.
type unlinkProbe struct {
	fuse.RawFileSystem
	probe func()
}

func (u *unlinkProbe) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	u.probe()
	return u.RawFileSystem.Unlink(cancel, h, name)
}

// TestURingUnlinkNoWait: an unlink answered on a ring queue's thread does
// not wait for the RELEASE of a file it finds closing (awaitRelease
// returns at once: that RELEASE may sit in the same queue behind the
// unlink, as when a file opens and closes between answersAlone's look at
// the mount's open files and the unlink), while off the queues' threads
// the same wait lasts ReleaseWait.
func TestURingUnlinkNoWait(t *testing.T) {
	needFUSE(t)
	setEnableURing(t, true)
	closing := func() *sharedFile { return &sharedFile{opens: 1, closed: 1} }
	start := time.Now()
	if n := closing().awaitRelease(context.Background()); n != 1 || time.Since(start) < ReleaseWait {
		t.Fatalf("off a queue's thread: %d open after %v, want 1 after %v or more", n, time.Since(start), ReleaseWait)
	}

	type result struct {
		onQueue bool
		opens   int
		took    time.Duration
	}
	results := make(chan result, 4)
	wrap := func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		return &unlinkProbe{RawFileSystem: raw, probe: func() {
			start := time.Now()
			n := closing().awaitRelease(context.Background())
			results <- result{fuseuring.OnQueueThread(), n, time.Since(start)}
		}}
	}
	back, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	opts := &fs.Options{MountOptions: fuse.MountOptions{FsName: "nowait-test", Name: "nfsrdmatest", MaxWrite: 1 << 20}}
	rs, err := serveRing(dir, -1, opts, wrap, root, func(uint32) bool { return true }, true)
	if err != nil {
		t.Skip("FUSE over io_uring:", err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { _ = rs.Unmount(); _ = rs.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("ring server did not stop; aborting")
			_ = rs.Abort()
			<-done
		}
	})
	p := filepath.Join(dir, "x")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if !r.onQueue {
			t.Fatal("the UNLINK was not answered on a queue's thread")
		}
		if r.opens != 1 || r.took >= ReleaseWait {
			t.Errorf("on a queue's thread: %d open after %v, want 1 at once (less than %v)", r.opens, r.took, ReleaseWait)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no UNLINK reached the file system")
	}
}
