package mounter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// startKeeper runs a Keeper on a new socket until the end of the test.
func startKeeper(t *testing.T) *Keeper {
	t.Helper()
	k := &Keeper{Socket: filepath.Join(t.TempDir(), "keeper.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	if !testenv.WaitFor(10*time.Second, func() bool { _, err := os.Stat(k.Socket); return err == nil }) {
		t.Fatal("keeper did not listen within 10 s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error("keeper Run:", err)
		}
		for _, target := range k.Kept() {
			k.Forget(target)
		}
	})
	return k
}

// content reads f from its start (a duplicate shares the file offset).
func content(t *testing.T, f *os.File) string {
	t.Helper()
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// TestKeeperFetchForget: a kept connection (here a token file) is handed
// out as a duplicate of the very file, any number of times; a target not
// kept, or forgotten, answers ErrNotKept; an unknown op is refused; no fd
// leaks.
func TestKeeperFetchForget(t *testing.T) {
	k := startKeeper(t)
	c := &Client{Socket: k.Socket}
	ctx := testenv.Context(t, 30*time.Second)
	base := fdCount(t)
	tok := tokenFile(t, "kept-1")
	if err := k.Keep("/t/a/", tok); err != nil {
		t.Fatal(err)
	}
	tok.Close()
	if got := k.Kept(); len(got) != 1 || got[0] != "/t/a" {
		t.Fatalf("Kept = %q, want [/t/a]", got)
	}
	for i := 0; i < 2; i++ {
		f, err := c.Fetch(ctx, "/t/a")
		if err != nil {
			t.Fatal(err)
		}
		if got := content(t, f); got != "kept-1" {
			t.Fatalf("fetched %q, want the kept file's kept-1", got)
		}
		f.Close()
	}
	if _, err := c.Fetch(ctx, "/t/b"); !errors.Is(err, ErrNotKept) {
		t.Fatalf("Fetch of a target not kept: %v, want ErrNotKept", err)
	}
	// Keep again replaces
	tok2 := tokenFile(t, "kept-2")
	if err := k.Keep("/t/a", tok2); err != nil {
		t.Fatal(err)
	}
	tok2.Close()
	f, err := c.Fetch(ctx, "/t/a")
	if err != nil || content(t, f) != "kept-2" {
		t.Fatalf("after Keep again: %v", err)
	}
	f.Close()
	if err := c.Forget(ctx, "/t/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "/t/a"); !errors.Is(err, ErrNotKept) {
		t.Fatalf("Fetch after Forget: %v, want ErrNotKept", err)
	}
	if err := c.Forget(ctx, "/t/a"); err != nil {
		t.Fatalf("Forget of a target not kept: %v", err)
	}
	if r := rawCall(t, k.Socket, []byte(`{"op":"mount"}`)); !strings.Contains(r.Error, "unknown op") {
		t.Fatalf("a mounter op to the keeper: %+v", r)
	}
	if r := rawCall(t, k.Socket, []byte(`{`)); !strings.Contains(r.Error, "bad request") {
		t.Fatalf("garbled request: %+v", r)
	}
	checkFDs(t, base)
}

// TestDuplicate: the mounter hands out a duplicate of a served mount's
// connection (what a restarted node plugin keeps again), and refuses a
// target it does not serve.
func TestDuplicate(t *testing.T) {
	e := startServer(t, "", "serve", 30*time.Second)
	ctx := testenv.Context(t, time.Minute)
	target := newTarget(t)
	tok := tokenFile(t, "dup-1")
	m, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, tok)
	tok.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killWait(t, m.PID) })
	f, err := e.c.Duplicate(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := content(t, f); got != "dup-1" {
		t.Fatalf("duplicate reads %q, want dup-1", got)
	}
	f.Close()
	if _, err := e.c.Duplicate(ctx, "/not/served"); err == nil || !strings.Contains(err.Error(), "not served") {
		t.Fatalf("Duplicate of a target not served: %v", err)
	}
}

// waitRecovered waits for a process started with --recover on target and
// returns its arguments.
func waitRecovered(t *testing.T, target string) string {
	t.Helper()
	var args []byte
	if !testenv.WaitFor(30*time.Second, func() bool {
		args, _ = os.ReadFile(filepath.Join(target, "args"))
		return strings.Contains(string(args), "--recover")
	}) {
		t.Fatalf("no process started with --recover on %s; args %q", target, args)
	}
	return string(args)
}

// TestRecoverFromKeeper: the mounter dies with every mount process (as
// its container does: kill -9 of its main process); the next mounter
// takes each mount whose connection the keeper holds up again on the
// keeper's duplicate (--recover, the same state map), and drops the state
// of one the keeper does not hold. A mount the mounter gives up (past
// its recoveries) is forgotten at the keeper.
func TestRecoverFromKeeper(t *testing.T) {
	k := startKeeper(t)
	state := t.TempDir()
	withKeeper := func(s *Server) { s.Keeper = k.Socket }
	e := startServer(t, state, "serve", 30*time.Second, withKeeper)
	ctx := testenv.Context(t, 2*time.Minute)
	kept, lost := newTarget(t), newTarget(t)
	var pids []int
	for _, target := range []string{kept, lost} {
		tok := tokenFile(t, "conn-of-"+filepath.Base(filepath.Dir(target)))
		m, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, tok)
		if err != nil {
			t.Fatal(err)
		}
		if target == kept {
			if err := k.Keep(target, tok); err != nil {
				t.Fatal(err)
			}
		}
		tok.Close()
		pids = append(pids, m.PID)
		for _, f := range []string{"fd3", "args"} {
			if err := os.Remove(filepath.Join(target, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// the container dies: the mounter and its mount processes, at once
	e.stop(t)
	for _, pid := range pids {
		killWait(t, pid)
	}

	e2 := startServer(t, state, "serve", 30*time.Second, withKeeper)
	args := waitRecovered(t, kept)
	want := "conn-of-" + filepath.Base(filepath.Dir(kept))
	if got, err := os.ReadFile(filepath.Join(kept, "fd3")); err != nil || string(got) != want {
		t.Fatalf("the recovering process read %q, %v from fd 3; want the keeper's duplicate (%s)", got, err, want)
	}
	if !strings.Contains(args, "--map-file="+filepath.Join(state, key(kept)+".map")) {
		t.Fatalf("recovering process arguments %q: not the mount's state map", args)
	}
	ms, err := e2.c.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].Target != kept || ms[0].PID == pids[0] {
		t.Fatalf("List after the recovery: %+v, %v; want %s served by a new process", ms, err, kept)
	}
	if _, err := os.Stat(filepath.Join(state, key(lost)+".json")); !os.IsNotExist(err) {
		t.Fatalf("state of the mount the keeper does not hold: %v", err)
	}
	if _, err := os.Stat(filepath.Join(lost, "args")); err == nil {
		t.Fatal("a mount the keeper does not hold was taken up")
	}

	// crashes past maxRecoveries: the mount is given up, and the keeper
	// lets its connection go
	pid := ms[0].PID
	for i := 0; ; i++ {
		if err := os.Remove(filepath.Join(kept, "args")); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if i == maxRecoveries {
			break
		}
		waitRecovered(t, kept)
		l, err := e2.c.List(ctx)
		if err != nil || len(l) != 1 {
			t.Fatalf("List after recovery %d: %+v %v", i+1, l, err)
		}
		pid = l[0].PID
	}
	if !testenv.WaitFor(10*time.Second, func() bool { return len(k.Kept()) == 0 }) {
		t.Fatalf("the keeper still holds %q after the mounter gave the mount up", k.Kept())
	}
	if l, _ := e2.c.List(ctx); len(l) != 0 {
		t.Fatalf("still listed after giving up: %+v", l)
	}
}
