package fuseuring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// paramMu serializes the tests that set EnableParam.
var paramMu sync.Mutex

// setEnable writes EnableParam for the test and restores it after.
func setEnable(t *testing.T, on bool) {
	t.Helper()
	old, err := os.ReadFile(EnableParam)
	if err != nil {
		t.Skip("kernel without FUSE over io_uring:", err)
	}
	v := "0"
	if on {
		v = "1"
	}
	paramMu.Lock()
	if err := os.WriteFile(EnableParam, []byte(v), 0); err != nil {
		paramMu.Unlock()
		t.Skip("cannot set", EnableParam, err)
	}
	t.Cleanup(func() {
		prev := "0"
		if strings.TrimSpace(string(old)) == "Y" {
			prev = "1"
		}
		_ = os.WriteFile(EnableParam, []byte(prev), 0)
		paramMu.Unlock()
	})
}

// watchdog aborts the connection of the mount on dir 15 s before the
// test's deadline (or after 2 minutes without one), so that a hung
// request fails the test with ENOTCONN instead of leaving callers of this
// process waiting in the kernel for an answer only this process could
// give.
func watchdog(t testing.TB, dir string) {
	d := 2 * time.Minute
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok {
			d = time.Until(dl) - 15*time.Second
		}
	}
	id, err := ConnectionID(dir)
	if err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(max(d, time.Second), func() {
		_ = AbortConnection(id)
	})
	t.Cleanup(func() { timer.Stop() })
}

// mountLoopback mounts a go-fuse loopback of a temporary directory with
// a Server of cfg, unmounted (aborted if that fails) at the end of the
// test; it returns the mount point, the backing directory and the server.
func mountLoopback(t testing.TB, cfg Config) (string, string, *Server) {
	t.Helper()
	return mountWrapped(t, cfg, nil)
}

// mountWrapped is mountLoopback with the loopback's raw file system
// wrapped by wrap (nil: not wrapped).
func mountWrapped(t testing.TB, cfg Config, wrap func(fuse.RawFileSystem) fuse.RawFileSystem) (string, string, *Server) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	back, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	opts := &fuse.MountOptions{FsName: "fuseuring-test", Name: "fuseuringtest", MaxWrite: 1 << 20, EnableLocks: true}
	fd, err := Mount(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(fd, dir, opts, cfg)
	watchdog(t, dir)
	raw := fs.NewNodeFS(root, &fs.Options{ServerCallbacks: srv})
	if wrap != nil {
		raw = wrap(raw)
	}
	if err := srv.Start(raw); err != nil {
		_ = Abort(dir)
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { _ = srv.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop; aborting")
			_ = srv.Abort()
			<-done
		}
	})
	return dir, back, srv
}

// exercise does files, directories and locks on dir and checks them
// against the backing directory back.
func exercise(t *testing.T, dir, back string) {
	t.Helper()
	data := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB: several 1 MiB WRITEs and READs
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, err %v", len(got), err)
	}
	if onDisk, err := os.ReadFile(filepath.Join(back, "f")); err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("backing file: %d bytes, err %v", len(onDisk), err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(dir, "d", "n"+string(rune('a'+i%26))+strings.Repeat("x", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "d"))
	if err != nil || len(ents) != 51 {
		t.Fatalf("readdir: %d entries, err %v", len(ents), err)
	}
	if err := os.Rename(p, filepath.Join(dir, "d", "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after rename: %v", err)
	}
	if err := os.Symlink("g", filepath.Join(dir, "d", "l")); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "d", "l")); err != nil || l != "g" {
		t.Fatalf("readlink %q %v", l, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "d", "g"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 10}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal("F_SETLK:", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal("flock:", err)
	}
	f.Close()
	if err := os.RemoveAll(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
}

func TestRing(t *testing.T) {
	setEnable(t, true)
	dir, back, srv := mountLoopback(t, Config{Ring: true})
	if err := srv.RingError(); err != nil {
		t.Fatal(err)
	}
	before := srv.Stats()
	exercise(t, dir, back)
	st := srv.Stats()
	if st.Transport != TransportIOURing || st.Queues != possibleCPUs() || st.Entries != DefaultEntries {
		t.Errorf("stats %+v, want io_uring over %d queues of %d entries", st, possibleCPUs(), DefaultEntries)
	}
	// Over 100 requests (LOOKUP, CREATE, WRITE, READ, ...) and all but
	// FORGETs over the ring.
	if n := st.RingRequests - before.RingRequests; n < 100 {
		t.Errorf("%d requests over the ring, want at least 100 (stats %+v)", n, st)
	}
	t.Logf("stats %+v", st)
}

func TestRingOffGivesDevFUSE(t *testing.T) {
	setEnable(t, true)
	dir, back, srv := mountLoopback(t, Config{})
	exercise(t, dir, back)
	if st := srv.Stats(); st.Transport != TransportDevFUSE || st.RingRequests != 0 || st.DevRequests < 100 {
		t.Errorf("stats %+v, want every request over /dev/fuse", st)
	}
}

func TestRingNotOfferedFallsBack(t *testing.T) {
	setEnable(t, false)
	if err := Available(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Available with %s N: %v, want ErrUnavailable", EnableParam, err)
	}
	dir, back, srv := mountLoopback(t, Config{Ring: true})
	if srv.RingError() == nil {
		t.Error("no RingError with the ring disabled in the kernel")
	}
	exercise(t, dir, back)
	if st := srv.Stats(); st.Transport != TransportDevFUSE || st.RingRequests != 0 {
		t.Errorf("stats %+v, want /dev/fuse", st)
	}
}
