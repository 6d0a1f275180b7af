package fusefs

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/lockdtest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// lockProc is a process (testdata/lockhelper.py) that takes fcntl and
// flock locks on a file, one command at a time.
type lockProc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	pid   int
}

func needPython(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: python3 is needed for the lock helper processes")
		}
		t.Skip("python3 not found: the lock tests run their lockers as python3 processes")
	}
	return p
}

// startLockProc starts a locker with path open.
func startLockProc(t *testing.T, name, path string) *lockProc {
	t.Helper()
	py := needPython(t)
	cmd := exec.Command(py, "-u", "testdata/lockhelper.py")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &lockProc{t: t, name: name, cmd: cmd, in: in, lines: make(chan string, 16), pid: cmd.Process.Pid}
	go func() {
		sc := bufio.NewScanner(outp)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) did not end after SIGKILL", name, p.pid)
		}
	})
	p.do("open " + path)
	return p
}

// send writes a command without waiting for its answer.
func (p *lockProc) send(c string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, c+"\n"); err != nil {
		p.t.Fatalf("%s: %s: %v", p.name, c, err)
	}
}

// answer waits up to d for the answer of the last command sent.
func (p *lockProc) answer(d time.Duration) (string, bool) {
	select {
	case l, ok := <-p.lines:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// do sends c and returns its answer (within 20 s).
func (p *lockProc) do(c string) string {
	p.t.Helper()
	p.send(c)
	a, ok := p.answer(20 * time.Second)
	if !ok {
		p.t.Fatalf("%s: %s: no answer", p.name, c)
	}
	return a
}

// must runs c and fails the test unless it answers want.
func (p *lockProc) must(c, want string) {
	p.t.Helper()
	if got := p.do(c); got != want {
		p.t.Fatalf("%s: %s: got %q, want %q", p.name, c, got, want)
	}
}

// mustAfterRelease runs c until it answers want, for up to 5 s while it
// answers "err EAGAIN": a flock or OFD lock ends at the RELEASE of its
// open file, which the kernel sends to FUSE after close(2) has returned
// (Linux fs/fuse/file.c, fuse_release is asynchronous), so another
// owner may find it still held for a moment after the holder's close.
func (p *lockProc) mustAfterRelease(c, want string) {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.do(c)
		if got == want {
			return
		}
		if got != "err EAGAIN" || time.Now().After(deadline) {
			p.t.Fatalf("%s: %s: got %q, want %q", p.name, c, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockEnv is our export server with an NLM service and two FUSE mounts
// of it, as two pods (or nodes) would have.
type lockEnv struct {
	srv    *testServer
	nlm    *lockdtest.Server
	d1, d2 string
	m1, m2 *Mount
}

// nlmService is the export server's lock manager (lockd: NLM v4 and NSM
// v1) on a TCP port of its own, its GRANTED callbacks and SM_NOTIFY going
// to this process's callback service.
func nlmService(t *testing.T) *lockdtest.Server {
	t.Helper()
	s := lockdtest.Start(t)
	s.CallbackPort, s.Notify = client.CallbackPort, true
	return s
}

// lockers starts a locker of file f on each mount: p1 on the first, p2
// on the second.
func (e *lockEnv) lockers(t *testing.T) (p1, p2 *lockProc) {
	t.Helper()
	return startLockProc(t, "p1", filepath.Join(e.d1, "f")), startLockProc(t, "p2", filepath.Join(e.d2, "f"))
}

func newLockEnv(t *testing.T, extra string) *lockEnv {
	t.Helper()
	return newLockEnvProto(t, mountopts.ProtoTCP, extra)
}

// newLockEnvProto is newLockEnv with NFS over proto (NLM is TCP).
func newLockEnvProto(t *testing.T, proto, extra string) *lockEnv {
	t.Helper()
	needFUSE(t)
	needPython(t)
	e := &lockEnv{srv: startServer(t), nlm: nlmService(t)}
	o := "lockport=" + strconv.Itoa(e.nlm.Port)
	if extra != "" {
		o += "," + extra
	}
	e.d1, e.m1 = e.srv.mount(t, proto, o)
	e.d2, e.m2 = e.srv.mount(t, mountopts.ProtoTCP, o) // the other mount over TCP
	if err := os.WriteFile(filepath.Join(e.srv.root, "f"), make([]byte, 1000), 0o666); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestLocksAcrossMounts: fcntl locks of processes on two mounts of one
// export exclude each other through NLM: conflicts, byte ranges, upgrade
// and split, F_GETLK's holder (pid, type, range), a blocked F_SETLKW
// granted when the holder unlocks, and locks released at close and exit.
func TestLocksAcrossMounts(t *testing.T) {
	e := newLockEnv(t, "")
	p1, p2 := e.lockers(t)

	p1.must("setlk w 0 10", "ok")
	p2.must("setlk w 5 1", "err EAGAIN")
	p2.must("setlk r 9 1", "err EAGAIN")
	p2.must("setlk w 10 10", "ok") // the next bytes are free
	p2.must("getlk w 0 0", "lock w 0 10 "+strconv.Itoa(p1.pid))
	p1.must("getlk r 0 20", "lock w 10 10 "+strconv.Itoa(p2.pid))
	p2.must("setlk u 10 10", "ok")

	// upgrade and split: p1 reads 100..199, writes 150..159
	p1.must("setlk r 100 100", "ok")
	p2.must("setlk r 120 10", "ok") // shared with shared
	p2.must("setlk u 120 10", "ok")
	p1.must("setlk w 150 10", "ok")
	p2.must("getlk r 100 50", "lock u 100 50 0") // no conflict: F_UNLCK, the range as asked
	p2.must("getlk r 140 40", "lock w 150 10 "+strconv.Itoa(p1.pid))
	p2.must("setlk r 160 5", "ok")
	p2.must("setlk w 100 10", "err EAGAIN")
	p2.must("setlk u 160 5", "ok")
	// p1 unlocks the middle of its write lock: 150..154 stays
	p1.must("setlk u 155 5", "ok")
	p2.must("setlk w 155 5", "ok")
	p2.must("setlk w 154 1", "err EAGAIN")
	p2.must("setlk u 155 5", "ok")

	// a blocked F_SETLKW is granted when the holder unlocks
	p2.send("setlkw w 0 5")
	if a, ok := p2.answer(300 * time.Millisecond); ok {
		t.Fatalf("F_SETLKW over a held lock answered %q", a)
	}
	p1.must("setlk u 0 10", "ok")
	if a, ok := p2.answer(10 * time.Second); !ok || a != "ok" {
		t.Fatalf("blocked F_SETLKW after the unlock: %q %v", a, ok)
	}
	p1.must("setlk w 0 1", "err EAGAIN")

	// close(2) of any descriptor releases the owner's locks
	p1.must("close", "ok")
	p2.must("setlk w 100 100", "ok")
	// and so does the end of the process
	p2.must("exit", "ok")
	_ = p2.cmd.Wait()
	p3 := startLockProc(t, "p3", filepath.Join(e.d1, "f"))
	p3.must("setlk w 0 0", "ok")
	p3.must("close", "ok")
	waitNoLocks(t, e.nlm)
	if st := e.m2.Client.Locks().Stats(); st.Callbacks == 0 {
		t.Errorf("mount 2 lock stats %+v: the blocked lock was not completed by the GRANTED callback", st)
	}
}

// waitNoLocks waits up to 5 s until n holds no lock and no blocked
// request.
func waitNoLocks(t *testing.T, n *lockdtest.Server) {
	t.Helper()
	if !testenv.WaitFor(5*time.Second, func() bool { h, w := n.Locks(); return h == 0 && w == 0 }) {
		_, w := n.Locks()
		t.Fatalf("locks left on the server: %v, %d blocked", n.HeldBy(), w)
	}
}

// TestLockSignalCancels: a signal to a process blocked in F_SETLKW (or
// flock) ends the wait with EINTR and cancels the blocked request: when
// the holder unlocks, the lock goes to nobody. SIGKILL does the same.
func TestLockSignalCancels(t *testing.T) {
	e := newLockEnv(t, "")
	p1, p2 := e.lockers(t)
	p1.must("setlk w 0 0", "ok")
	start := time.Now()
	p2.must("setlkw w 0 0 1", "err EINTR") // SIGALRM after 1 s
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("F_SETLKW returned after %v, before the signal", d)
	}
	p2.must("flock ex 1", "err EINTR")
	if _, w := e.nlm.Locks(); w != 0 {
		t.Fatalf("%d blocked requests left on the server after EINTR", w)
	}

	p3 := startLockProc(t, "p3", filepath.Join(e.d2, "f"))
	p3.send("setlkw w 0 0")
	waitBlocked(t, e.nlm)
	if err := p3.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p3.cmd.Wait()
	testenv.Eventually(t, 5*time.Second, "the blocked request of a killed process to leave the server",
		func() bool { _, w := e.nlm.Locks(); return w == 0 })
	p1.must("setlk u 0 0", "ok")
	time.Sleep(200 * time.Millisecond)
	p4 := startLockProc(t, "p4", filepath.Join(e.d1, "f"))
	p4.must("setlk w 0 0", "ok") // nobody got the lock
	if h := e.nlm.Held(int32(p2.pid)); len(h) != 0 {
		t.Fatalf("interrupted process holds %v", h)
	}
	if h := e.nlm.Held(int32(p3.pid)); len(h) != 0 {
		t.Fatalf("killed process holds %v", h)
	}
}

// waitBlocked waits up to 10 s for a blocked request on n.
func waitBlocked(t *testing.T, n *lockdtest.Server) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "a blocked request on the server", func() bool { _, w := n.Locks(); return w > 0 })
}

// TestFlockAcrossMounts: flock(2) locks exclude across mounts (whole-file
// NLM locks of the open file), shared ones share, a blocked flock is
// granted at the unlock, and the last close releases.
func TestFlockAcrossMounts(t *testing.T) {
	e := newLockEnv(t, "")
	p1, p2 := e.lockers(t)
	p1.must("flock ex nb", "ok")
	p2.must("flock sh nb", "err EAGAIN") // EWOULDBLOCK
	p2.send("flock sh")
	if a, ok := p2.answer(300 * time.Millisecond); ok {
		t.Fatalf("blocking flock over an exclusive one answered %q", a)
	}
	p1.must("flock sh nb", "ok") // downgrade
	if a, ok := p2.answer(10 * time.Second); !ok || a != "ok" {
		t.Fatalf("blocked shared flock after the downgrade: %q %v", a, ok)
	}
	p1.must("flock ex nb", "err EAGAIN")
	p2.must("close", "ok") // the last close of p2's open file releases it
	p1.mustAfterRelease("flock ex nb", "ok")
	p1.must("flock un", "ok")
	p1.must("close", "ok")
	waitNoLocks(t, e.nlm)
}

// TestLocksReleasedAtUnmount: the locks a mount still holds when it ends
// (processes holding them and their files open) are unlocked.
func TestLocksReleasedAtUnmount(t *testing.T) {
	needFUSE(t)
	needPython(t)
	srv := startServer(t)
	n := nlmService(t)
	mo, err := mountopts.Parse("proto=tcp,mountport=" + strconv.Itoa(srv.mountPort) + ",port=" + strconv.Itoa(srv.nfsPort) + ",lockport=" + strconv.Itoa(n.Port))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := NewMount(ctx, dir, Config{Source: "127.0.0.1:/", Options: mo, AuthSys: sunrpc.AuthSysParams{MachineName: "fusefs-test"}})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- m.Wait() }()
	unmounted := false
	t.Cleanup(func() { // a failed test still unmounts
		if !unmounted {
			_ = m.Unmount(time.Second)
			<-waited
		}
		_ = syscallUnmount(dir, mntDetach)
	})
	p := startLockProc(t, "p", filepath.Join(dir, "f"))
	q := startLockProc(t, "q", filepath.Join(dir, "g"))
	p.must("setlk w 0 10", "ok")
	q.must("flock ex nb", "ok")
	if h := n.HeldBy(); len(h) != 2 {
		t.Fatalf("locks on the server: %v, want two owners", h)
	}
	// the mount ends while p and q hold their locks and files open (its
	// connection aborted, as when the kernel ends it): its locks go
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	abortFUSE(t, st.Dev)
	select {
	case <-waited:
		unmounted = true
	case <-time.After(15 * time.Second):
		t.Fatal("mount did not end")
	}
	if h := n.HeldBy(); len(h) != 0 {
		t.Fatalf("locks left on the server after the mount ended: %v", h)
	}
}

// TestLocalLocks: nolock keeps every lock in the kernel (no NLM call,
// no exclusion across mounts, exclusion within one); local_lock=flock
// and local_lock=posix keep one kind in the mount and send the other.
func TestLocalLocks(t *testing.T) {
	t.Run("nolock", func(t *testing.T) {
		e := newLockEnv(t, "nolock")
		p1, p2 := e.lockers(t)
		p3 := startLockProc(t, "p3", filepath.Join(e.d1, "f"))
		p1.must("setlk w 0 0", "ok")
		p2.must("setlk w 0 0", "ok") // another mount: not excluded
		p3.must("setlk w 0 0", "err EAGAIN")
		p3.must("getlk w 0 0", "lock w 0 0 "+strconv.Itoa(p1.pid))
		p1.must("flock ex nb", "ok")
		p2.must("flock ex nb", "ok")
		p3.must("flock ex nb", "err EAGAIN")
		if c := len(e.nlm.Calls()); c != 0 {
			t.Fatalf("%d NLM calls with nolock", c)
		}
	})
	t.Run("local_lock=flock", func(t *testing.T) {
		e := newLockEnv(t, "local_lock=flock")
		p1, p2 := e.lockers(t)
		p3 := startLockProc(t, "p3", filepath.Join(e.d1, "f"))
		p1.must("flock ex nb", "ok")
		p2.must("flock ex nb", "ok")         // local to each mount
		p3.must("flock ex nb", "err EAGAIN") // same mount
		p3.send("flock sh")
		if a, ok := p3.answer(200 * time.Millisecond); ok {
			t.Fatalf("local blocking flock answered %q while held", a)
		}
		p1.must("flock un", "ok")
		if a, ok := p3.answer(5 * time.Second); !ok || a != "ok" {
			t.Fatalf("local blocking flock after unlock: %q %v", a, ok)
		}
		n := len(e.nlm.Calls())
		p1.must("setlk w 0 0", "ok")
		p2.must("setlk w 0 0", "err EAGAIN") // POSIX locks go to the server
		if len(e.nlm.Calls()) <= n {
			t.Fatal("POSIX locks not sent with local_lock=flock")
		}
	})
	t.Run("local_lock=posix", func(t *testing.T) {
		e := newLockEnv(t, "local_lock=posix")
		p1, p2 := e.lockers(t)
		p3 := startLockProc(t, "p3", filepath.Join(e.d1, "f"))
		p1.must("setlk w 0 10", "ok")
		p2.must("setlk w 0 10", "ok")
		p3.must("setlk r 5 1", "err EAGAIN")
		p3.must("getlk r 0 0", "lock w 0 10 "+strconv.Itoa(p1.pid))
		p1.must("close", "ok") // released locally at close
		p3.must("setlk r 5 1", "ok")
		if c := len(e.nlm.Calls()); c != 0 {
			t.Fatalf("%d NLM calls for local POSIX locks", c)
		}
		p2.must("flock ex nb", "ok")
		p3.must("flock ex nb", "err EAGAIN") // flock goes to the server
	})
}

// TestLockReclaimAfterServerRestart: the lock manager restarts (its
// locks lost); from its state directory it sends SM_NOTIFY to this
// client, which reclaims its locks in the grace period, so another mount
// is still refused them.
func TestLockReclaimAfterServerRestart(t *testing.T) {
	e := newLockEnv(t, "")
	e.nlm.Grace = 3 * time.Second
	p1, p2 := e.lockers(t)
	p1.must("setlk r 0 10", "ok")
	p1.must("setlk w 20 10", "ok")
	p2.must("setlk w 25 1", "err EAGAIN")
	e.nlm.Restart() // the server crashes
	if e.nlm.GraceRemaining() == 0 {
		t.Fatal("restarted lock manager has no grace period")
	}
	if !testenv.WaitFor(10*time.Second, func() bool { return len(e.nlm.Held(int32(p1.pid))) == 2 }) {
		t.Fatalf("locks not reclaimed: server holds %v; client stats %+v", e.nlm.HeldBy(), e.m1.Client.Locks().Stats())
	}
	// in the grace period a new lock waits (retried); after it, the
	// reclaimed locks still exclude
	p2.must("setlk w 25 1", "err EAGAIN")
	p2.must("setlk r 5 1", "ok")
	if e.nlm.GraceRemaining() != 0 {
		t.Fatal("a new lock was granted in the grace period")
	}
	p1.must("close", "ok")
	p2.must("setlk w 0 0", "ok")
}

// TestSQLiteAcrossMounts: two processes on two mounts (the first over
// TCP, then over RDMA) write one SQLite
// database (which locks with fcntl) in read-modify-write transactions:
// every transaction sees the one before, whichever mount made it, and
// the database is intact.
func TestSQLiteAcrossMounts(t *testing.T) {
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) { testSQLite(t, newLockEnvProto(t, proto, "")) })
	}
}

func testSQLite(t *testing.T, e *lockEnv) {
	py := needPython(t)
	if err := exec.Command(py, "-c", "import sqlite3").Run(); err != nil {
		t.Skip("python3 without sqlite3")
	}
	const rows = 60
	var cmds []*exec.Cmd
	for i, d := range []string{e.d1, e.d2} {
		c := exec.Command(py, "testdata/sqlitewriter.py", filepath.Join(d, "db"), "w"+strconv.Itoa(i), strconv.Itoa(rows))
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("sqlite writer: %v", err)
			}
		case <-time.After(3 * time.Minute):
			_ = c.Process.Kill()
			t.Fatal("sqlite writer did not finish")
		}
	}
	out, err := exec.Command(py, "-c", `import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("PRAGMA integrity_check").fetchone()[0],
      c.execute("SELECT COUNT(*), COUNT(DISTINCT total), MAX(total), COUNT(DISTINCT writer) FROM t").fetchone())`,
		filepath.Join(e.srv.root, "db")).CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	want := "ok (" + strconv.Itoa(2*rows) + ", " + strconv.Itoa(2*rows) + ", " + strconv.Itoa(2*rows) + ", 2)\n"
	if string(out) != want {
		t.Fatalf("database on the server: %q, want %q (integrity, rows, distinct totals, max total, writers)", out, want)
	}
}

// TestOFDLocksAcrossMounts: open file description locks (F_OFD_SETLK)
// exclude across mounts and end at the last close of their open file.
func TestOFDLocksAcrossMounts(t *testing.T) {
	e := newLockEnv(t, "")
	p1, p2 := e.lockers(t)
	p1.must("ofdsetlk w 0 10", "ok")
	p2.must("ofdsetlk w 5 1", "err EAGAIN")
	p2.must("setlk r 5 1", "err EAGAIN")
	p1.must("close", "ok")
	p2.mustAfterRelease("ofdsetlk w 0 10", "ok")
	p2.must("close", "ok")
	waitNoLocks(t, e.nlm)
}
