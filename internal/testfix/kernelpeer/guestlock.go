package kernelpeer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	toolMu sync.Mutex
	tool   string // the guest path of fcntllock, once built
)

// LockTool builds ./fcntllock (static, CGO_ENABLED=0) into the 9p share
// ($KP_SHARE/fcntllock) once per test binary and returns its path in the
// guest, /host/fcntllock.
func LockTool(t testing.TB) string {
	t.Helper()
	toolMu.Lock()
	defer toolMu.Unlock()
	if tool != "" {
		return tool
	}
	share := Env(t, "KP_SHARE")["KP_SHARE"]
	_, file, _, _ := runtime.Caller(0)
	// built under a temporary name and renamed, so that a guest process
	// of another test binary running the previous build keeps its file
	tmp := filepath.Join(share, fmt.Sprintf(".fcntllock-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", tmp, "./fcntllock")
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build fcntllock: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, filepath.Join(share, "fcntllock")); err != nil {
		t.Fatal(err)
	}
	tool = "/host/fcntllock"
	return tool
}

// GuestLock is a POSIX lock held by a process in the guest (fcntllock
// -hold), until Release.
type GuestLock struct {
	t       testing.TB
	log     string // the process's output, in the guest
	release string // the file whose creation ends it
	Pid     int    // the process id in the guest
	done    bool
}

// HoldLock starts a process in the guest that locks path (typ "r" or
// "w", start, length n: 0 to the end of the file) with F_SETLK, or with
// F_SETLKW when wait is set, and holds the lock until Release or the end
// of t. It returns once the process started; Result says how the lock
// call ended.
func HoldLock(t testing.TB, path, typ string, start, n int64, wait bool) *GuestLock {
	t.Helper()
	bin := LockTool(t)
	id := fmt.Sprintf("/tmp/guestlock-%d-%d", os.Getpid(), time.Now().UnixNano())
	g := &GuestLock{t: t, log: id + ".log", release: id + ".release"}
	flags := "-hold " + g.release
	if wait {
		flags += " -wait"
	}
	out := Sh(t, fmt.Sprintf("%s %s %s %s %d %d >%s 2>&1 </dev/null & echo $!", bin, flags, path, typ, start, n, g.log))
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("guest lock holder: %q", out)
	}
	g.Pid = pid
	t.Cleanup(g.Release)
	return g
}

// Result waits up to d for the outcome of the lock call ("locked",
// "denied", "error ...") and returns it, "" when there is none yet.
func (g *GuestLock) Result(d time.Duration) string {
	g.t.Helper()
	deadline := time.Now().Add(d)
	for {
		out := strings.TrimSpace(Sh(g.t, "cat "+g.log+" 2>/dev/null || true"))
		if l, _, _ := strings.Cut(out, "\n"); l != "" {
			return l
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Release ends the holder (its close releases the lock) and waits for it
// to exit.
func (g *GuestLock) Release() {
	g.t.Helper()
	if g.done {
		return
	}
	g.done = true
	Sh(g.t, fmt.Sprintf("touch %s; for i in $(seq 1 100); do kill -0 %d 2>/dev/null || break; sleep 0.1; done; kill -9 %d 2>/dev/null; rm -f %s %s; true",
		g.release, g.Pid, g.Pid, g.release, g.log))
}

// TestLock runs F_GETLK for typ start n on path in the guest and returns
// "free" or "held TYPE START LEN PID".
func TestLock(t testing.TB, path, typ string, start, n int64) string {
	t.Helper()
	return strings.TrimSpace(Sh(t, fmt.Sprintf("%s -test %s %s %d %d", LockTool(t), path, typ, start, n)))
}

// TryLock runs F_SETLK for typ start n on path in the guest, released at
// once, and returns "locked" or "denied".
func TryLock(t testing.TB, path, typ string, start, n int64) string {
	t.Helper()
	return strings.TrimSpace(Sh(t, fmt.Sprintf("%s %s %s %d %d", LockTool(t), path, typ, start, n)))
}

func itoa(i int) string { return strconv.Itoa(i) }

// FileLocks returns the lines of the guest's /proc/locks for the file at
// guestPath (matched by inode number: the sixth field ends ":INODE").
func FileLocks(t testing.TB, guestPath string) []string {
	t.Helper()
	ino := strings.TrimSpace(Sh(t, "stat -c %i "+guestPath))
	var out []string
	for _, l := range strings.Split(Sh(t, "cat /proc/locks"), "\n") {
		if f := strings.Fields(l); len(f) >= 6 && strings.HasSuffix(f[5], ":"+ino) {
			out = append(out, l)
		}
	}
	return out
}
