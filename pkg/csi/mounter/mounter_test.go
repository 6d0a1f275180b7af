package mounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// env is a mounter Server running in this process on a real unix
// socket, whose mount processes are this test binary (helperMain).
type env struct {
	s      *Server
	c      *Client
	sock   string
	state  string
	cancel context.CancelFunc
	done   chan error
}

// startServer runs a Server on a new socket with state directory state
// ("" for a new one), mount processes in helper mode mode, and stops it
// at the end of the test. Mount processes still running then are killed.
// Each opt sets up the Server before it runs.
func startServer(t *testing.T, state, mode string, readyTimeout time.Duration, opts ...func(*Server)) *env {
	t.Helper()
	if state == "" {
		state = t.TempDir()
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "mounter.sock")
	s := &Server{Socket: sock, StateDir: state, Exe: exe, ExtraArgs: []string{"--helper=" + mode}, ReadyTimeout: readyTimeout}
	for _, o := range opts {
		o(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{s: s, c: &Client{Socket: sock}, sock: sock, state: state, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unixpacket", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mounter did not listen within 10 s")
		}
		select {
		case err := <-e.done:
			t.Fatal("mounter stopped:", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Cleanup(func() {
		e.stop(t)
		for _, m := range s.List() {
			killWait(t, m.PID)
		}
	})
	return e
}

// stop stops the server (idempotent); its mount processes go on.
func (e *env) stop(t *testing.T) {
	t.Helper()
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		if err != nil {
			t.Error("Run:", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10 s of its context's end")
	}
}

// running reports whether pid is a live process (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// killWait kills pid (a mount process this test started) and waits for
// it to be gone.
func killWait(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 || !running(pid) {
		return
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	if !testenv.WaitFor(10*time.Second, func() bool { return !running(pid) }) {
		t.Errorf("pid %d still running after SIGKILL", pid)
	}
}

// fdCount is the number of open fds of this process.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // ReadDir's own
}

// checkFDs waits (up to 5 s: the server closes a request's fds after it
// answered) for the fd count to come back to base.
func checkFDs(t *testing.T, base int) {
	t.Helper()
	n := 0
	if !testenv.WaitFor(5*time.Second, func() bool { n = fdCount(t); return n <= base }) {
		t.Errorf("%d fds open, %d before: leaked", n, base)
	}
}

// tokenFile returns an open temp file holding a unique token: the fd the
// node plugin would pass is /dev/fuse; here the helper proves it got this
// very file by copying what it reads from fd 3.
func tokenFile(t *testing.T, token string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func newTarget(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMountListRelease mounts through the client: the passed fd reaches
// the mount process as fd 3, with the expected arguments, in its own
// session; the mount is listed and has a state file; when the process
// exits after its "unmount", Release returns and the mount and its state
// are gone; no fd is left open in the mounter.
func TestMountListRelease(t *testing.T) {
	e := startServer(t, "", "serve", 30*time.Second)
	ctx := testenv.Context(t, time.Minute)
	if ms, err := e.c.List(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("List of a new mounter: %v, %v", ms, err)
	}
	base := fdCount(t)
	target := newTarget(t)
	fuse := tokenFile(t, "token-1")
	m, err := e.c.Mount(ctx, Mount{Target: target + "/", Source: "10.0.0.1:/vol", Options: "proto=rdma,port=20049", MachineName: "node-1", VolumeID: "vol-1", PodUID: "pod-1"}, fuse)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killWait(t, m.PID) })
	fuse.Close()
	if m.Target != target || m.PID <= 0 || m.Started.IsZero() || m.Log == "" || m.MetricsSocket == "" || m.VolumeID != "vol-1" || m.PodUID != "pod-1" {
		t.Fatalf("mount answered %+v", m)
	}
	if got, err := os.ReadFile(filepath.Join(target, "fd3")); err != nil || string(got) != "token-1" {
		t.Fatalf("the mount process read %q, %v from fd 3; want the passed file's token-1", got, err)
	}
	args, err := os.ReadFile(filepath.Join(target, "args"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"mount", "--helper=serve", "--fuse-fd=3", "--ready-fd=4", "--metrics-socket=" + m.MetricsSocket,
		"--handover-socket=" + m.HandoverSocket, "--map-file=" + m.MapFile,
		"-o", "proto=rdma,port=20049", "--machine-name", "node-1", "--state-dir=" + filepath.Join(filepath.Dir(m.Log), "nsm"), "10.0.0.1:/vol", target}
	if got := strings.Split(string(args), "\n")[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mount process arguments %q, want %q", got, want)
	}
	if sid, err := unix.Getsid(m.PID); err != nil || sid != m.PID {
		t.Fatalf("mount process session %d (%v), want its own (%d)", sid, err, m.PID)
	}
	ms, err := e.c.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].PID != m.PID || ms[0].Target != target {
		t.Fatalf("List: %+v, %v", ms, err)
	}
	state := filepath.Join(e.state, key(target)+".json")
	var saved Mount
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &saved) != nil || saved.PID != m.PID {
		t.Fatalf("state file %s: %+v, %v", state, saved, err)
	}
	// the running process's pidfd (os.Process) and the mounter's
	// duplicate of the mount's /dev/fuse descriptor (crash recovery)
	checkFDs(t, base+2)

	// the "unmount": the process exits by itself; Release waits for it
	if err := os.RemoveAll(target); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Release(ctx, target, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if running(m.PID) {
		t.Fatalf("pid %d still running after Release", m.PID)
	}
	if ms, err := e.c.List(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("List after Release: %+v, %v", ms, err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("state file after Release: %v", err)
	}
	if _, err := os.Stat(m.Log); !os.IsNotExist(err) {
		t.Fatalf("log of a mount process that ended cleanly, after Release: %v", err)
	}
	// releasing what is not served is no error
	if err := e.c.Release(ctx, target, time.Second); err != nil {
		t.Fatal(err)
	}
	checkFDs(t, base)
}

// TestMountFailures checks that a mount process that fails, exits before
// answering, or never answers is reported as ErrMount with its reason,
// leaves no process, no mount and no fd behind; and that bad mounts are
// refused before any process starts.
func TestMountFailures(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
	}{
		{"fail", "NFS MOUNT refused: access denied"},
		{"early", "boom: server unreachable"},
		{"hang", "not mounted within"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			e := startServer(t, "", tc.mode, 2*time.Second)
			ctx := testenv.Context(t, time.Minute)
			base := fdCount(t)
			target := newTarget(t)
			fuse := tokenFile(t, "x")
			_, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, fuse)
			fuse.Close()
			if !errors.Is(err, ErrMount) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("mount: %v; want ErrMount with %q", err, tc.want)
			}
			if ms, err := e.c.List(ctx); err != nil || len(ms) != 0 {
				t.Fatalf("List after a failed mount: %+v, %v", ms, err)
			}
			if m := e.s.List(); len(m) != 0 {
				t.Fatalf("server still lists %+v", m)
			}
			if _, err := os.Stat(filepath.Join(e.state, key(target)+".json")); !os.IsNotExist(err) {
				t.Fatalf("state file of a failed mount: %v", err)
			}
			if _, err := os.Stat(filepath.Join(e.state, key(target)+".log")); err != nil {
				t.Fatalf("the log of a failed mount is kept for troubleshooting: %v", err)
			}
			checkFDs(t, base)
		})
	}
	t.Run("refused", func(t *testing.T) {
		e := startServer(t, "", "serve", 10*time.Second)
		ctx := testenv.Context(t, time.Minute)
		base := fdCount(t)
		fuse := tokenFile(t, "x")
		for _, m := range []Mount{
			{Target: "relative/target", Source: "h:/e"},
			{Target: newTarget(t)},
		} {
			if _, err := e.c.Mount(ctx, m, fuse); err == nil || errors.Is(err, ErrMount) {
				t.Errorf("mount %+v: %v, want a refusal", m, err)
			}
		}
		fuse.Close()
		if m := e.s.List(); len(m) != 0 {
			t.Fatalf("server lists %+v", m)
		}
		checkFDs(t, base)
	})
}

// rawCall sends b with fds on a new connection and returns the answer.
func rawCall(t *testing.T, sock string, b []byte, fds ...int) Response {
	t.Helper()
	c, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(30 * time.Second))
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := uc.WriteMsgUnix(b, oob, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	n, err := uc.Read(buf)
	if err != nil {
		t.Fatal("no answer:", err)
	}
	var r Response
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		t.Fatalf("answer %q: %v", buf[:n], err)
	}
	return r
}

// TestMalformedRequests sends bad requests on a raw socket: each gets a
// clear error, every fd passed with them is closed by the mounter, and no
// process starts.
func TestMalformedRequests(t *testing.T) {
	e := startServer(t, "", "serve", 10*time.Second)
	f := tokenFile(t, "x")
	g := tokenFile(t, "y")
	fd, gd := int(f.Fd()), int(g.Fd())
	mount, _ := json.Marshal(Request{Op: OpMount, Mount: Mount{Target: newTarget(t), Source: "h:/e"}})
	list, _ := json.Marshal(Request{Op: OpList})
	huge, _ := json.Marshal(Request{Op: OpMount, Mount: Mount{Target: "/" + strings.Repeat("x", MaxMessage), Source: "h:/e"}})
	rawCall(t, e.sock, list) // the server's own fds (epoll, ...) are open
	base := fdCount(t)
	for _, tc := range []struct {
		name string
		b    []byte
		fds  []int
		want string
	}{
		{"not JSON", []byte("{op: mount"), []int{fd}, "bad request"},
		{"unknown op", []byte(`{"op":"format"}`), []int{fd}, `unknown op "format"`},
		{"mount without fd", mount, nil, "want exactly 1 fd, got 0"},
		{"mount with 2 fds", mount, []int{fd, gd}, "want exactly 1 fd, got 2"},
		{"oversized", huge, []int{fd}, "exceeds"},
		{"too many fds", mount, []int{fd, gd, fd, gd, fd, gd, fd, gd}, "fd"},
	} {
		r := rawCall(t, e.sock, tc.b, tc.fds...)
		if !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: answered %+v, want an error with %q", tc.name, r, tc.want)
		}
	}
	// an fd sent with a request that takes none is closed too
	if r := rawCall(t, e.sock, list, fd, gd); r.Error != "" || len(r.Mounts) != 0 {
		t.Errorf("list with fds: %+v", r)
	}
	// an empty message: refused as bad, or read as the end of the
	// connection when it carries no fd (package net cannot tell them
	// apart); its fd is closed either way
	c, err := net.Dial("unixpacket", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix(nil, unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	ans := make([]byte, 1000)
	if n, err := c.Read(ans); err == nil && !strings.Contains(string(ans[:n]), "bad request") {
		t.Errorf("an empty message answered with %q", ans[:n])
	}
	c.Close()
	// a client that connects and goes away
	c, err = net.Dial("unixpacket", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if m := e.s.List(); len(m) != 0 {
		t.Fatalf("server lists %+v", m)
	}
	f.Close()
	g.Close()
	checkFDs(t, base-2)
}

// TestConcurrentMounts runs mounts of distinct targets at once (all
// served, by distinct processes), then two mounts of one target at once
// (one is served, the other refused), then releases them all at once.
func TestConcurrentMounts(t *testing.T) {
	e := startServer(t, "", "serve", 30*time.Second)
	ctx := testenv.Context(t, 2*time.Minute)
	base := fdCount(t)
	const n = 6
	targets := make([]string, n)
	for i := range targets {
		targets[i] = newTarget(t)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	pids := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fuse := tokenFile(t, "token-"+strconv.Itoa(i))
			m, err := e.c.Mount(ctx, Mount{Target: targets[i], Source: "h:/e"}, fuse)
			fuse.Close()
			errs[i], pids[i] = err, m.PID
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range n {
		t.Cleanup(func() { killWait(t, pids[i]) })
		if errs[i] != nil {
			t.Fatalf("mount %d: %v", i, errs[i])
		}
		if got, _ := os.ReadFile(filepath.Join(targets[i], "fd3")); string(got) != "token-"+strconv.Itoa(i) {
			t.Fatalf("mount %d got fd content %q", i, got)
		}
		if seen[pids[i]] {
			t.Fatalf("pid %d serves two mounts", pids[i])
		}
		seen[pids[i]] = true
	}
	if ms, err := e.c.List(ctx); err != nil || len(ms) != n {
		t.Fatalf("List: %d mounts, %v", len(ms), err)
	}

	same := newTarget(t)
	var ok, refused int
	var mu sync.Mutex
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fuse := tokenFile(t, "same")
			m, err := e.c.Mount(ctx, Mount{Target: same, Source: "h:/e"}, fuse)
			fuse.Close()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
				t.Cleanup(func() { killWait(t, m.PID) })
			} else {
				refused++
				t.Log("second mount of one target:", err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || refused != 1 {
		t.Fatalf("two concurrent mounts of one target: %d served, %d refused; want 1 and 1", ok, refused)
	}
	if ms, err := e.c.List(ctx); err != nil || len(ms) != n+1 {
		t.Fatalf("List: %d mounts, %v", len(ms), err)
	}

	for _, d := range append(targets, same) {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	rerrs := make(chan error, n+1)
	for _, d := range append(targets, same) {
		go func() { rerrs <- e.c.Release(ctx, d, 20*time.Second) }()
	}
	for range n + 1 {
		if err := <-rerrs; err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := e.c.List(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("List after Release: %+v, %v", ms, err)
	}
	checkFDs(t, base)
}

// TestReleaseTerminates releases mounts whose process does not exit by
// itself: one ends on SIGTERM, the other ignores it and is killed.
func TestReleaseTerminates(t *testing.T) {
	for _, mode := range []string{"serve", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			e := startServer(t, "", mode, 30*time.Second)
			ctx := testenv.Context(t, time.Minute)
			target := newTarget(t)
			fuse := tokenFile(t, "x")
			m, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, fuse)
			fuse.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killWait(t, m.PID) })
			if err := e.c.Release(ctx, target, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if running(m.PID) {
				t.Fatalf("pid %d still running after Release", m.PID)
			}
			if ms := e.s.List(); len(ms) != 0 {
				t.Fatalf("still listed: %+v", ms)
			}
		})
	}
}

// TestAdoptAfterRestart stops the mounter while a mount is served: the
// process goes on; a new mounter on the same state directory adopts it
// (same PID), drops the state of mounts no longer served, and releases
// the adopted mount.
func TestAdoptAfterRestart(t *testing.T) {
	state := t.TempDir()
	e := startServer(t, state, "stubborn", 30*time.Second)
	ctx := testenv.Context(t, time.Minute)
	target := newTarget(t)
	fuse := tokenFile(t, "x")
	m, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e", VolumeID: "v"}, fuse)
	fuse.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killWait(t, m.PID) })
	e.stop(t)
	if !running(m.PID) {
		t.Fatal("the mount process ended with the mounter")
	}
	if _, err := e.c.List(ctx); err == nil {
		t.Fatal("a stopped mounter answered")
	}

	// state of mounts gone: a process that exited, and a garbled file
	dead := Mount{Target: "/gone", Source: "h:/e", PID: exitedPID(t)}
	b, _ := json.Marshal(dead)
	deadState := filepath.Join(state, key(dead.Target)+".json")
	if err := os.WriteFile(deadState, b, 0o600); err != nil {
		t.Fatal(err)
	}
	garbled := filepath.Join(state, "garbled.json")
	if err := os.WriteFile(garbled, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	// a live process that is not a mount of the target
	other := Mount{Target: "/other", Source: "h:/e", PID: os.Getpid()}
	b, _ = json.Marshal(other)
	otherState := filepath.Join(state, key(other.Target)+".json")
	if err := os.WriteFile(otherState, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e2 := startServer(t, state, "stubborn", 30*time.Second)
	ms, err := e2.c.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].PID != m.PID || ms[0].Target != target || ms[0].VolumeID != "v" || !ms[0].Started.Equal(m.Started) {
		t.Fatalf("after restart: %+v, %v; want %+v", ms, err, m)
	}
	for _, p := range []string{deadState, garbled, otherState} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("state %s of a mount not served: %v", p, err)
		}
	}
	// mounting the served target again is refused while it is served
	fuse = tokenFile(t, "y")
	if _, err := e2.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, fuse); err == nil || !strings.Contains(err.Error(), strconv.Itoa(m.PID)) {
		t.Fatalf("mounting a served target: %v", err)
	}
	fuse.Close()
	// the adopted process ignores SIGTERM: Release kills it
	if err := e2.c.Release(ctx, target, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if running(m.PID) {
		t.Fatalf("adopted pid %d still running after Release", m.PID)
	}
	if !testenv.WaitFor(10*time.Second, func() bool { return len(e2.s.List()) == 0 }) {
		t.Fatalf("still listed: %+v", e2.s.List())
	}
	if _, err := os.Stat(filepath.Join(state, key(target)+".json")); !os.IsNotExist(err) {
		t.Fatalf("state of the released mount: %v", err)
	}
}

// exitedPID returns the PID of a process that has exited (and been
// reaped).
func exitedPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

// TestClientGone checks that a mount whose caller gave up (its context
// ended: the node plugin's call timed out) is stopped at once rather than
// at the ready timeout, so that the caller's retry is not refused.
func TestClientGone(t *testing.T) {
	e := startServer(t, "", "hang", 10*time.Minute)
	target := newTarget(t)
	fuse := tokenFile(t, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := e.c.Mount(ctx, Mount{Target: target, Source: "h:/e"}, fuse)
	fuse.Close()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("mount with an ended context: %v", err)
	}
	var pid int
	if ms := e.s.List(); len(ms) == 1 {
		pid = ms[0].PID
		t.Cleanup(func() { killWait(t, pid) })
	}
	if !testenv.WaitFor(10*time.Second, func() bool { return len(e.s.List()) == 0 }) {
		t.Fatalf("the abandoned mount is still served: %+v", e.s.List())
	}
	if pid > 0 && running(pid) {
		t.Fatalf("pid %d of the abandoned mount still runs", pid)
	}
}

// TestListMany lists more mounts than fit one MaxMessage response.
func TestListMany(t *testing.T) {
	e := startServer(t, "", "serve", 10*time.Second)
	const n = 400
	e.s.mu.Lock()
	for i := range n {
		target := fmt.Sprintf("/var/lib/kubelet/pods/%08d-aaaa-bbbb-cccc-dddddddddddd/volumes/kubernetes.io~csi/pvc-%08d-1111-2222-3333-444444444444/mount", i, i)
		p := &proc{m: Mount{Target: target, Source: "10.0.0.1:/pvc", Options: "proto=rdma,port=20049,credits=32", PID: 1 << 22, Started: time.Now(),
			Log: filepath.Join(e.state, key(target)+".log"), MetricsSocket: filepath.Join(e.state, key(target)+".metrics.sock")}, done: make(chan struct{})}
		e.s.mounts[target] = p
	}
	e.s.mu.Unlock()
	t.Cleanup(func() {
		e.s.mu.Lock()
		clear(e.s.mounts)
		e.s.mu.Unlock()
	})
	ms, err := e.c.List(testenv.Context(t, time.Minute))
	if err != nil || len(ms) != n {
		t.Fatalf("List of %d mounts: %d, %v", n, len(ms), err)
	}
	for i := 1; i < n; i++ {
		if ms[i-1].Target >= ms[i].Target {
			t.Fatalf("List not sorted at %d", i)
		}
	}
}

// TestMountErrorStatus: a mount the serving process reports failed with an
// NFS status meaning "no such volume" (the directory was removed on the
// server) matches that status and ErrMount, with the message unchanged;
// other failures match ErrMount only.
func TestMountErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want error
	}{
		{"nfs client: mount srv:/pvc-1: nfs3 FSINFO: NFS3ERR_STALE: stale file handle", nfs3.ErrStale},
		{"nfs client: mount srv:/pvc-1: MNT3ERR_NOENT: no such file or directory", nfs3.ErrNoEnt},
		{"nfs client: lookup: NFS3ERR_NOENT: no such file or directory", nfs3.ErrNoEnt},
		{"nfs client: dial: connection refused", nil},
	} {
		err := mountError(tc.msg)
		if !errors.Is(err, ErrMount) {
			t.Errorf("%q: %v is not ErrMount", tc.msg, err)
		}
		if want := ErrMount.Error() + ": " + tc.msg; err.Error() != want {
			t.Errorf("message %q, want %q", err.Error(), want)
		}
		for _, s := range []error{nfs3.ErrStale, nfs3.ErrNoEnt} {
			if got := errors.Is(err, s); got != (s == tc.want) {
				t.Errorf("%q: errors.Is(err, %v) = %v", tc.msg, s, got)
			}
		}
	}
}
