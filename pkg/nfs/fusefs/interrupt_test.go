package fusefs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"golang.org/x/sys/unix"
)

// hardMount mounts a fresh export server over TCP with hard,noac (every
// stat a GETATTR) and writes the file it returns; the caller stops the
// server (srv.stop) to make the mount hang.
func hardMount(t *testing.T) (srv *testServer, dir, f string, m *Mount) {
	t.Helper()
	needFUSE(t)
	srv = startServer(t)
	dir, m = srv.mount(t, mountopts.ProtoTCP, "hard,noac,timeo=5")
	f = filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, dir, f, m
}

// TestInterruptGrace: a FUSE request whose NFS call cannot finish (the
// server is gone and the mount is hard) goes on after its caller is
// signalled (FUSE_INTERRUPT) until the grace has passed, then ends with
// EINTR, so that its goroutine is free; a directory listing ends with EIO
// instead (dirStream.Readdirent: go-fuse would drop entries behind an
// EINTR that the caller retries); requests never interrupted are
// never cancelled (TestSignalledCallers checks that an interrupted
// request that can finish reports its true outcome).
func TestInterruptGrace(t *testing.T) {
	srv, dir, f, m := hardMount(t)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	const grace = 700 * time.Millisecond
	in := m.sys.intr
	in.mu.Lock()
	in.grace = grace
	in.mu.Unlock()
	srv.stop()

	var took time.Duration
	var statErr error
	onSignalledThread(t, func() error {
		start := time.Now()
		var st unix.Stat_t
		statErr = unix.Stat(f, &st) // noac: a GETATTR that cannot be answered
		took = time.Since(start)
		return nil
	})
	t.Logf("stat of a file on a hard mount whose server is gone, caller signalled: %v after %v", statErr, took)
	if !errors.Is(statErr, unix.EINTR) {
		t.Fatalf("stat: %v, want EINTR once the grace has passed", statErr)
	}
	if took < grace {
		t.Fatalf("stat ended after %v, before the grace of %v", took, grace)
	}
	if limit := grace + 3*in.tick() + 2*time.Second; took > limit {
		t.Fatalf("stat ended after %v, want at most %v", took, limit)
	}

	var lsErr error
	onSignalledThread(t, func() error {
		start := time.Now()
		_, lsErr = unix.Getdents(dfd, make([]byte, 8192)) // a READDIRPLUS that cannot be answered
		took = time.Since(start)
		return nil
	})
	t.Logf("listing on that mount, caller signalled: %v after %v", lsErr, took)
	if !errors.Is(lsErr, unix.EIO) || took < grace {
		t.Fatalf("getdents: %v after %v, want EIO once the grace of %v has passed", lsErr, took, grace)
	}
	in.mu.Lock()
	left := len(in.reqs)
	in.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d FUSE requests still registered", left)
	}
}

// TestInterruptKilled: a caller killed (SIGKILL) while its request waits
// on a hard mount whose server is gone dies at the watcher's next tick,
// not after the grace: FUSE would keep it in uninterruptible sleep until
// we answer, and nobody reads the answer.
func TestInterruptKilled(t *testing.T) {
	srv, _, f, m := hardMount(t)
	srv.stop()
	in := m.sys.intr
	cmd := exec.Command("stat", f) // noac: a GETATTR that cannot be answered
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		in.mu.Lock()
		n := len(in.reqs)
		in.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("stat's request never reached the file system")
		}
	}
	start := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	limit := 3*in.tick() + 2*time.Second
	select {
	case err := <-done:
		t.Logf("killed caller gone after %v (%v); grace %v", time.Since(start), err, InterruptGrace)
	case <-time.After(limit):
		t.Fatalf("a killed caller still waits after %v (grace %v)", limit, InterruptGrace)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		in.mu.Lock()
		n := len(in.reqs)
		in.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d FUSE requests still registered", n)
		}
	}
}
