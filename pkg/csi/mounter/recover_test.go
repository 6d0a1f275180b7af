package mounter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestRecoverAfterKill: the mount process is killed (SIGKILL): the
// mounter starts another on its own duplicate of the connection's fd
// (the same file: token-1 on fd 3), with --recover and the same state
// map; the mount is listed with the new process. A process ending with
// SIGTERM is not restarted.
func TestRecoverAfterKill(t *testing.T) {
	e, ctx, target, m := mountToken(t, "serve")
	if err := os.Remove(filepath.Join(target, "fd3")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var args []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		args, _ = os.ReadFile(filepath.Join(target, "args"))
		if strings.Contains(string(args), "--recover") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process started with --recover after the kill; args %q", args)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, err := os.ReadFile(filepath.Join(target, "fd3")); err != nil || string(got) != "token-1" {
		t.Fatalf("the recovering process read %q, %v from fd 3; want the kept duplicate of the connection (token-1)", got, err)
	}
	if !strings.Contains(string(args), "--map-file="+filepath.Join(e.state, key(target)+".map")) {
		t.Fatalf("recovering process arguments %q: not the mount's state map", args)
	}
	ms, err := e.c.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].PID == m.PID || ms[0].PID <= 0 {
		t.Fatalf("List after the recovery: %+v, %v (killed pid %d)", ms, err, m.PID)
	}
	t.Cleanup(func() { killWait(t, ms[0].PID) })
	// SIGTERM is an end, not a crash
	if err := os.Remove(filepath.Join(target, "args")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(ms[0].PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		l, err := e.c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still listed after SIGTERM: %+v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(target, "args")); err == nil {
		t.Fatal("a process was started after a SIGTERM")
	}
}

// TestRecoverCrashRightAfterReady: a process taking a crashed mount's
// connection up that crashes right after its ready line (before or while
// its launch returns) is a crash to recover again, not a failed recovery
// nor a dead process recorded as serving: a second --recover process
// serves the mount.
func TestRecoverCrashRightAfterReady(t *testing.T) {
	e, ctx, target, m := mountToken(t, "recovercrash")
	if err := os.Remove(filepath.Join(target, "args")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ms []Mount
	var err error
	if !testenv.WaitFor(20*time.Second, func() bool {
		ms, err = e.c.List(ctx)
		if err != nil || len(ms) != 1 || ms[0].PID == m.PID || !alive(ms[0]) {
			return false
		}
		_, crashed := os.Stat(filepath.Join(target, "recovercrash"))
		return crashed == nil
	}) {
		t.Fatalf("no live process serves the mount after a recovering process crashed at once: %+v, %v", ms, err)
	}
	t.Cleanup(func() { killWait(t, ms[0].PID) })
	if args, _ := os.ReadFile(filepath.Join(target, "args")); !strings.Contains(string(args), "--recover") {
		t.Fatalf("serving process arguments %q: not a recovery", args)
	}
}

// mountToken starts a mounter whose mount processes are the helper in
// mode, and mounts a new target on a connection stand-in (a file holding
// "token-1", closed after: the mounter keeps its own duplicate).
func mountToken(t *testing.T, mode string) (*env, context.Context, string, Mount) {
	t.Helper()
	e := startServer(t, "", mode, 30*time.Second)
	ctx := testenv.Context(t, time.Minute)
	target := newTarget(t)
	fuse := tokenFile(t, "token-1")
	m, err := e.c.Mount(ctx, Mount{Target: target, Source: "10.0.0.1:/vol"}, fuse)
	fuse.Close()
	if err != nil {
		t.Fatal(err)
	}
	return e, ctx, target, m
}
