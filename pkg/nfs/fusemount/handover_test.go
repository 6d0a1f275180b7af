package fusemount

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/lockdtest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	nlmproto "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"golang.org/x/sys/unix"
)

// childEnv names the environment variable that makes the test binary a
// `driver mount` process: its value is the JSON of a Config.
const childEnv = "FUSEMOUNT_TEST_CHILD"

// goEnv, when set, is the fd a child reads one byte from before it runs:
// a process that must start later is forked early, while the test has
// no file of the mount open (the fork's exec closes them, a FLUSH that a
// dead mount process would never answer).
const goEnv = "FUSEMOUNT_TEST_GO"

// lingerEnv, when set, is the fd a child reads one byte from (or its end)
// after Run returns nil, before it exits: an old process that exits late
// after a handover, its end of the handover socket still open.
const lingerEnv = "FUSEMOUNT_TEST_LINGER"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(runChild(v))
	}
	os.Exit(m.Run())
}

// runChild runs Run as `driver mount` does, in this process, until
// SIGTERM; its ready fd is 3.
func runChild(v string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ReadyFD = 3
	if g := os.Getenv(goEnv); g != "" {
		// wait for the test's go-ahead (a byte, or the pipe's end)
		fd, _ := strconv.Atoi(g)
		var b [1]byte
		_, _ = os.NewFile(uintptr(fd), "go").Read(b[:])
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	if l := os.Getenv(lingerEnv); l != "" {
		fd, _ := strconv.Atoi(l)
		var b [1]byte
		_, _ = os.NewFile(uintptr(fd), "linger").Read(b[:])
	}
	return 0
}

// mountProc is a `driver mount` process of a test.
type mountProc struct {
	cmd  *exec.Cmd
	done chan error
	log  *lockedWriter
}

// startMount starts the test binary as a mount process for cfg and waits
// for its "ok".
func startMount(t *testing.T, cfg Config, extra ...*os.File) *mountProc {
	t.Helper()
	p, ready := startMountLater(t, cfg, false, extra...)
	ready()
	return p
}

// startMountLater starts the test binary as a mount process for cfg
// (with held: waiting for go-ahead, which ready gives) and returns ready,
// which waits for its "ok".
func startMountLater(t *testing.T, cfg Config, held bool, extra ...*os.File) (*mountProc, func()) {
	t.Helper()
	return startMountEnv(t, cfg, held, nil, extra...)
}

// startMountEnv is startMountLater with env added to the child's
// environment; the first of extra is the child's fd 4, and so on.
func startMountEnv(t *testing.T, cfg Config, held bool, env []string, extra ...*os.File) (*mountProc, func()) {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+string(b)), env...)
	cmd.ExtraFiles = append([]*os.File{pw}, extra...)
	var gw *os.File
	if held {
		gr, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		gw = w
		cmd.Env = append(cmd.Env, goEnv+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, gr)
		defer gr.Close()
	}
	w := &lockedWriter{w: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &mountProc{cmd: cmd, done: make(chan error, 1), log: w}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if gw != nil {
			gw.Close()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("mount process %d:\n%s", cmd.Process.Pid, w.String())
		}
	})
	ready := func() {
		t.Helper()
		defer pr.Close()
		if gw != nil {
			_, _ = gw.Write([]byte{1})
		}
		type res struct {
			line string
			err  error
		}
		lc := make(chan res, 1)
		go func() {
			l, err := bufio.NewReader(pr).ReadString('\n')
			lc <- res{l, err}
		}()
		select {
		case r := <-lc:
			if strings.TrimSpace(r.line) != "ok" {
				t.Fatalf("mount process: %q %v\n%s", r.line, r.err, w.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("mount process not ready after 60 s:\n%s", w.String())
		}
	}
	return p, ready
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// wait waits for the process to exit, with its error.
func (p *mountProc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("mount process %d still running after %v", p.cmd.Process.Pid, d)
		return nil
	}
}

// handoverEnv is an export, a mount point and the sockets of two
// generations of mount processes.
type handoverEnv struct {
	root, dir, opts string
	sock            [3]string
}

func newHandoverEnv(t *testing.T, opts string) *handoverEnv {
	t.Helper()
	testenv.NeedRootFUSE(t)
	e := exporttest.Start(t, exporttest.Options{Node: "n"})
	if opts == "" {
		opts = e.TCPOptions() + ",nolock"
	}
	return newHandoverEnvExport(t, e, opts)
}

func (h *handoverEnv) cfg(gen int, version string) Config {
	c := Config{Source: "127.0.0.1:/vol", Dir: h.dir, Options: h.opts, MachineName: "handover-test",
		UnmountTimeout: 5 * time.Second, HandoverSocket: h.sock[gen], Version: version}
	if gen > 0 {
		c.Takeover = h.sock[gen-1]
	}
	return c
}

// writer writes random blocks to a file of the mount, each followed by
// fsync(2), until stopped, and hashes what it wrote; it records the
// longest write+fsync.
type writer struct {
	f       *os.File
	sum     func() []byte
	written atomic.Int64 // bytes whose fsync returned
	blocks  [][32]byte   // SHA-256 of each block whose fsync returned
	block   int
	longest time.Duration
	err     error
	stop    chan struct{}
	done    chan struct{}
}

func startWriter(t *testing.T, path string, block int) *writer {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	w := &writer{f: f, block: block, stop: make(chan struct{}), done: make(chan struct{}), sum: func() []byte { return h.Sum(nil) }}
	go func() {
		defer close(w.done)
		buf := make([]byte, block)
		for {
			select {
			case <-w.stop:
				w.err = f.Close()
				return
			default:
			}
			_, _ = rand.Read(buf)
			t0 := time.Now()
			if _, err := f.Write(buf); err != nil {
				w.err = err
				return
			}
			if err := f.Sync(); err != nil {
				w.err = err
				return
			}
			w.longest = max(w.longest, time.Since(t0))
			h.Write(buf)
			w.blocks = append(w.blocks, sha256.Sum256(buf))
			w.written.Add(int64(len(buf)))
		}
	}()
	return w
}

func (w *writer) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		t.Fatal("writer stuck")
	}
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

func fileSum(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil)
}

// A continuous write+fsync loop goes on across two handovers (first to
// second process, second to third): no error, every byte on the server.
func TestHandoverWriteLoop(t *testing.T) {
	h := newHandoverEnv(t, "")
	p0 := startMount(t, h.cfg(0, "v0"))
	w := startWriter(t, filepath.Join(h.dir, "loop"), 64<<10)
	time.Sleep(300 * time.Millisecond)
	before := w.written.Load()
	p1 := startMount(t, h.cfg(1, "v1"))
	if err := p0.wait(t, 30*time.Second); err != nil {
		t.Fatalf("old mount process: %v\n%s", err, p0.log.String())
	}
	time.Sleep(300 * time.Millisecond)
	p2 := startMount(t, h.cfg(2, "v2"))
	if err := p1.wait(t, 30*time.Second); err != nil {
		t.Fatalf("second mount process: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	w.finish(t)
	if w.written.Load() <= before {
		t.Fatalf("no write after the handovers (%d bytes before, %d in all)", before, w.written.Load())
	}
	if got, want := fileSum(t, filepath.Join(h.root, "loop")), w.sum(); string(got) != string(want) {
		t.Fatalf("server's file: sha256 %s, written %s (%d bytes)", hex.EncodeToString(got), hex.EncodeToString(want), w.written.Load())
	}
	t.Logf("%d bytes written and fsynced across 2 handovers; longest write+fsync (the pause seen): %v", w.written.Load(), w.longest)
	logHandovers(t, p0, p1, p2)
}

// logHandovers logs the handover lines of the processes' logs.
func logHandovers(t *testing.T, ps ...*mountProc) {
	t.Helper()
	for i, p := range ps {
		for _, l := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(l, "handover") || strings.Contains(l, "handed over") || strings.Contains(l, "took the mount") || strings.Contains(l, "sends again") {
				t.Logf("process %d: %s", i, l)
			}
		}
	}
}

// locker is a python3 process taking fcntl locks on a file
// (../fusefs/testdata/lockhelper.py).
type locker struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startLocker(t *testing.T, path string) *locker {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the lock test's lockers are python3 processes")
	}
	cmd := exec.Command(py, "-u", "../fusefs/testdata/lockhelper.py")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &locker{cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
		close(l.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	l.must(t, "open "+path, "ok")
	return l
}

func (l *locker) send(t *testing.T, c string) {
	t.Helper()
	if _, err := io.WriteString(l.in, c+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (l *locker) answer(d time.Duration) (string, bool) {
	select {
	case a, ok := <-l.lines:
		return a, ok
	case <-time.After(d):
		return "", false
	}
}

func (l *locker) must(t *testing.T, c, want string) {
	t.Helper()
	l.send(t, c)
	if a, _ := l.answer(20 * time.Second); a != want {
		t.Fatalf("%s: %q, want %q", c, a, want)
	}
}

// A lock held across a handover stays held by the same owner (svid) on
// the server, and a process blocked in F_SETLKW at the handover is
// granted the lock once the holder unlocks through the successor.
func TestHandoverBlockedLock(t *testing.T) {
	testenv.NeedRootFUSE(t)
	e := exporttest.Start(t, exporttest.Options{Node: "n"})
	nlm := lockdtest.Start(t)
	h := newHandoverEnv(t, e.TCPOptions()+",lockport="+strconv.Itoa(nlm.Port))
	h.root = filepath.Join(e.Root, "vol")
	if err := os.WriteFile(filepath.Join(h.root, "f"), make([]byte, 1000), 0o666); err != nil {
		t.Fatal(err)
	}
	p0 := startMount(t, h.cfg(0, "v0"))
	holder := startLocker(t, filepath.Join(h.dir, "f"))
	waiter := startLocker(t, filepath.Join(h.dir, "f"))
	holder.must(t, "setlkw w 0 100", "ok")
	held := nlm.HeldBy()
	if len(held) != 1 {
		t.Fatalf("server's holders before the handover: %v", held)
	}
	var svid int32
	for s := range held {
		svid = s
	}
	waiter.send(t, "setlkw w 0 100")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, w := nlm.Locks(); w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter's LOCK never reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	p1 := startMount(t, h.cfg(1, "v1"))
	if err := p0.wait(t, 30*time.Second); err != nil {
		t.Fatalf("old mount process: %v", err)
	}
	pause := time.Since(t0)
	if a, ok := waiter.answer(500 * time.Millisecond); ok {
		t.Fatalf("the waiter was answered %q while the lock is held", a)
	}
	if got := nlm.Held(svid); len(got) != 1 {
		t.Fatalf("after the handover the server's holders are %v; want svid %d holding", nlm.HeldBy(), svid)
	}
	holder.must(t, "setlk u 0 100", "ok")
	if a, ok := waiter.answer(20 * time.Second); !ok || a != "ok" {
		t.Fatalf("the waiter after the unlock: %q %v", a, ok)
	}
	after := nlm.HeldBy()
	if len(after) != 1 || after[svid] != nil {
		t.Fatalf("server's holders after the unlock: %v (the waiter alone should hold)", after)
	}
	t.Logf("handover with a lock held and one waiting took %v (process start included)", pause)
	logHandovers(t, p0, p1)
}

// Lock calls waiting out the lock server's grace period (the client
// asks again every 5 s, as Linux) when a handover starts: the handover
// does not wait for them (its drain would wait until the grace period
// ends, or time out).
//   - setlk: a non-blocking F_SETLK; the old process gives the call up,
//     the kernel sends the request again to the successor, which asks
//     again and is granted the lock once the grace period is over.
//   - release: the unlock of a flock lock at the close of its file (the
//     RELEASE), which the kernel cannot send again usefully (go-fuse has
//     forgotten the open file): the handover carries it, and the
//     successor unlocks once the grace period is over.
func TestHandoverLockInGrace(t *testing.T) {
	for _, name := range []string{"setlk", "release"} {
		t.Run(name, func(t *testing.T) {
			testenv.NeedRootFUSE(t)
			e := exporttest.Start(t, exporttest.Options{Node: "n"})
			nlm := lockdtest.Start(t)
			nlm.Grace = 10 * time.Second
			h := newHandoverEnvExport(t, e, e.TCPOptions()+",lockport="+strconv.Itoa(nlm.Port))
			if err := os.WriteFile(filepath.Join(h.root, "f"), make([]byte, 1000), 0o666); err != nil {
				t.Fatal(err)
			}
			p0 := startMount(t, h.cfg(0, "v0"))
			holder := startLocker(t, filepath.Join(h.dir, "f"))
			if name == "setlk" {
				holder.must(t, "setlk w 0 10", "ok")
			} else {
				holder.must(t, "flock ex nb", "ok")
			}
			// a client that locked: a grace period follows a restart
			nlm.Restart()
			var waiter *locker
			proc := uint32(nlmproto.ProcUnlock)
			if name == "setlk" {
				waiter = startLocker(t, filepath.Join(h.dir, "f"))
				waiter.send(t, "setlk w 100 10")
				proc = nlmproto.ProcLock
			} else {
				holder.must(t, "close", "ok") // the RELEASE follows
			}
			refused := func() bool {
				for _, c := range nlm.Calls() {
					if c.Proc == proc && !c.Reclaim && c.Stat == nlmproto.DeniedGracePeriod {
						return true
					}
				}
				return false
			}
			for deadline := time.Now().Add(10 * time.Second); !refused(); {
				if time.Now().After(deadline) {
					t.Fatalf("no call %d refused for the grace period: %+v", proc, nlm.Calls())
				}
				time.Sleep(10 * time.Millisecond)
			}
			t0 := time.Now()
			p1 := startMount(t, h.cfg(1, "v1"))
			if err := p0.wait(t, 60*time.Second); err != nil {
				t.Fatalf("old mount process: %v", err)
			}
			took := time.Since(t0)
			if left := nlm.GraceRemaining(); left <= 0 {
				t.Fatalf("the handover took %v, until the grace period ended: it waited for the lock call", took)
			}
			if !strings.Contains(p0.log.String(), "handed over") {
				t.Fatalf("no handover in the old process's log:\n%s", p0.log.String())
			}
			if name == "setlk" {
				if a, ok := waiter.answer(0); ok {
					t.Fatalf("the waiter was answered %q in the grace period", a)
				}
				a, ok := waiter.answer(30 * time.Second)
				if !ok || a != "ok" {
					t.Fatalf("the waiter after the grace period: %q %v", a, ok)
				}
				if left := nlm.GraceRemaining(); left > 0 {
					t.Fatalf("the waiter was granted the lock %v before the grace period's end", left)
				}
				var granted bool
				for _, rs := range nlm.HeldBy() {
					for _, r := range rs {
						granted = granted || r.Start == 100 && r.End == 109 && r.Exclusive
					}
				}
				if !granted {
					t.Fatalf("the server's locks: %v; want 100-109 held", nlm.HeldBy())
				}
			} else {
				if len(nlm.HeldBy()) == 0 {
					t.Fatal("the flock lock was not reclaimed in the grace period")
				}
				for deadline := time.Now().Add(30 * time.Second); len(nlm.HeldBy()) != 0; {
					if time.Now().After(deadline) {
						t.Fatalf("the server's locks 30 s after the handover: %v; want the closed file's unlocked", nlm.HeldBy())
					}
					time.Sleep(50 * time.Millisecond)
				}
				// another process locks the file
				other := startLocker(t, filepath.Join(h.dir, "f"))
				other.must(t, "flock ex nb", "ok")
			}
			t.Logf("handover with a lock call waiting out the grace period took %v (process start included)", took)
			logHandovers(t, p0, p1)
		})
	}
}

// One large write (1 GiB; 64 MiB with -short) of a single write(2) then
// fsync, over TCP and over RPC-over-RDMA (software iWARP), with a
// handover in the middle: the write returns the whole size, the server
// has every byte.
func TestHandoverLargeWrite(t *testing.T) {
	size := 1 << 30
	if testing.Short() {
		size = 64 << 20
	}
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) {
			testenv.NeedRootFUSE(t)
			e := exporttest.Start(t, exporttest.Options{Node: "n", RDMA: proto == "rdma"})
			opts := e.TCPOptions() + ",nolock"
			if proto == "rdma" {
				opts = "proto=rdma,rdmadev=siw,credits=16,port=" + strconv.Itoa(e.RDMAPort) + ",mountport=" + strconv.Itoa(e.MntPort) + ",nolock"
			}
			h := newHandoverEnvExport(t, e, opts)
			p0 := startMount(t, h.cfg(0, "v0"))
			buf := make([]byte, size)
			_, _ = rand.Read(buf)
			want := sha256.Sum256(buf)
			f, err := os.Create(filepath.Join(h.dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				n   int
				err error
				d   time.Duration
			}
			done := make(chan result, 1)
			t0 := time.Now()
			go func() {
				n, err := f.Write(buf)
				if err == nil {
					err = f.Sync()
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				done <- result{n, err, time.Since(t0)}
			}()
			// hand over once the server has part of the file
			deadline := time.Now().Add(60 * time.Second)
			for {
				if fi, err := os.Stat(filepath.Join(h.root, "big")); err == nil && fi.Size() > int64(size/8) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the write does not reach the server")
				}
				time.Sleep(5 * time.Millisecond)
			}
			p1 := startMount(t, h.cfg(1, "v1"))
			if err := p0.wait(t, 60*time.Second); err != nil {
				t.Fatalf("old mount process: %v", err)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Minute):
				t.Fatal("the write did not end")
			}
			if r.err != nil || r.n != size {
				t.Fatalf("write: %d bytes, %v", r.n, r.err)
			}
			if got := fileSum(t, filepath.Join(h.root, "big")); string(got) != string(want[:]) {
				t.Fatal("the server's file differs from what was written")
			}
			t.Logf("%d MiB written across a handover in %v", size>>20, r.d)
			logHandovers(t, p0, p1)
		})
	}
}

// newHandoverEnvExport is newHandoverEnv for an export already started.
func newHandoverEnvExport(t *testing.T, e *exporttest.Export, opts string) *handoverEnv {
	t.Helper()
	sd := t.TempDir()
	h := &handoverEnv{root: filepath.Join(e.Root, "vol"), dir: t.TempDir(), opts: opts}
	for i := range h.sock {
		h.sock[i] = filepath.Join(sd, "handover-"+strconv.Itoa(i)+".sock")
	}
	return h
}

// mountFUSE opens /dev/fuse and mounts it on target as the CSI node
// plugin does (the mount process answers INIT on it), returning the fd:
// the test keeps it, as the mounter does, so that the connection
// outlives a mount process.
func mountFUSE(t *testing.T, target string) *os.File {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts := strings.Join(append([]string{"fd=" + strconv.Itoa(int(f.Fd())), "rootmode=40000", "user_id=0", "group_id=0",
		"allow_other", "max_read=" + strconv.Itoa(client.MaxIOSize)}, mountopts.KernelOptions...), ",")
	if err := unix.Mount("127.0.0.1:/vol", target, "fuse.nfsrdma", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// never leave a connection nobody serves: its callers would hang
		_ = fuseuring.Abort(target)
		_ = unix.Unmount(target, unix.MNT_DETACH)
		f.Close()
	})
	return f
}

// lost describes the first block of w (done) whose fsync returned and
// that the server's file at path does not hold: its number, offset, and
// whether the server has zeros there (a write that never reached it).
func (w *writer) lost(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	buf := make([]byte, w.block)
	for i, want := range w.blocks {
		off := int64(i) * int64(w.block)
		n, err := f.ReadAt(buf, off)
		if n < len(buf) {
			return fmt.Sprintf("block %d (offset %d): the server's file ends within it (%v)", i, off, err)
		}
		if sha256.Sum256(buf) != want {
			zeros := true
			for _, b := range buf {
				if b != 0 {
					zeros = false
					break
				}
			}
			return fmt.Sprintf("block %d of %d (offset %d) differs on the server (zeros: %v)", i, len(w.blocks), off, zeros)
		}
	}
	return "no block differs"
}

// prefixSum is the SHA-256 of the first n bytes of path.
func prefixSum(t *testing.T, path string, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, n); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h.Sum(nil)
}

// kill -9 of the mount process during a write+fsync loop: a process
// started with --recover on the connection the test kept takes it up
// from the state map, without an unmount; every write whose fsync
// returned is on the server; the loop goes on, or its fsync in progress
// reports EIO (what the dead process acknowledged may be lost), never a
// success for lost data; the mount serves new files afterwards.
func TestRecoverAfterKill(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) {
			testenv.NeedRootFUSE(t)
			e := exporttest.Start(t, exporttest.Options{Node: "n", RDMA: proto == "rdma"})
			opts := e.TCPOptions() + ",nolock"
			if proto == "rdma" {
				opts = "proto=rdma,rdmadev=siw,credits=16,port=" + strconv.Itoa(e.RDMAPort) + ",mountport=" + strconv.Itoa(e.MntPort) + ",nolock"
			}
			h := newHandoverEnvExport(t, e, opts)
			fuse := mountFUSE(t, h.dir)
			cfg := h.cfg(0, "v0")
			cfg.HandoverSocket, cfg.FD, cfg.MapFile = "", 4, filepath.Join(t.TempDir(), "map")
			p0 := startMount(t, cfg, fuse)
			cfg.Recover, cfg.Version = true, "v1"
			_, recovered := startMountLater(t, cfg, true, fuse)
			if err := os.Mkdir(filepath.Join(h.dir, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			w := startWriter(t, filepath.Join(h.dir, "d", "loop"), 64<<10)
			time.Sleep(300 * time.Millisecond)
			if err := p0.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = p0.wait(t, 10*time.Second)
			killed := time.Now()
			time.Sleep(100 * time.Millisecond)
			recovered()
			up := time.Since(killed)
			time.Sleep(300 * time.Millisecond)
			close(w.stop)
			select {
			case <-w.done:
			case <-time.After(60 * time.Second):
				t.Fatal("writer stuck after the recovery")
			}
			if w.err != nil && !errorsIsEIO(w.err) {
				t.Fatalf("writer: %v (only EIO, for writes the dead process acknowledged, is allowed)", w.err)
			}
			if got := prefixSum(t, filepath.Join(h.root, "d", "loop"), w.written.Load()); string(got) != string(w.sum()) {
				t.Fatalf("the server lacks writes whose fsync returned (%d bytes): %s; writer ended with %v",
					w.written.Load(), w.lost(filepath.Join(h.root, "d", "loop")), w.err)
			}
			// the mount serves on: the same directory, a new file
			data := []byte("after the crash")
			if err := os.WriteFile(filepath.Join(h.dir, "d", "new"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(h.root, "d", "new")); err != nil || string(got) != string(data) {
				t.Fatalf("new file on the server: %q %v", got, err)
			}
			t.Logf("%d bytes acknowledged by fsync, all on the server; writer ended with %v; mount up again %v after the kill; longest write+fsync (the pause seen) %v",
				w.written.Load(), w.err, up, w.longest)
		})
	}
}

func errorsIsEIO(err error) bool {
	return errors.Is(err, syscall.EIO)
}

// freezeListener is the export server's NFS listener whose connections
// can be frozen: what a frozen connection brings after the freeze is
// dropped unread by the server, as if lost on the way (a WRITE that left
// the mount process and never reached the server).
type freezeListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*freezeConn
}

func (l *freezeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &freezeConn{Conn: c, closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, fc)
	l.mu.Unlock()
	return fc, nil
}

// freeze freezes the connections accepted so far.
func (l *freezeListener) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.frozen.Store(true)
	}
}

type freezeConn struct {
	net.Conn
	frozen atomic.Bool
	once   sync.Once
	closed chan struct{}
}

// Read drops what arrives once frozen, blocking until the connection is
// closed.
func (c *freezeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.frozen.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *freezeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A write(2) the mount process answered (write-behind) whose WRITE never
// reached the server when the process was killed: the fsync(2) after
// --recover reports EIO, whether it came after the recovery (the
// recovered process had no WRITE of the file; a close(2) of a duplicate
// descriptor before it does not take the error from it) or was in
// progress at the kill (the kernel sends it again); never a success for
// the lost data.
func TestRecoverLostWrite(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		name := "fsync-after"
		if inFlight {
			name = "fsync-in-flight"
		}
		t.Run(name, func(t *testing.T) {
			testenv.NeedRootFUSE(t)
			var fl *freezeListener
			e := exporttest.Start(t, exporttest.Options{Node: "n", WrapNFS: func(l net.Listener) net.Listener {
				fl = &freezeListener{Listener: l}
				return fl
			}})
			t.Cleanup(func() {
				fl.mu.Lock()
				defer fl.mu.Unlock()
				for _, c := range fl.conns {
					c.Close()
				}
			})
			h := newHandoverEnvExport(t, e, e.TCPOptions()+",nolock")
			fuse := mountFUSE(t, h.dir)
			cfg := h.cfg(0, "v0")
			cfg.HandoverSocket, cfg.FD, cfg.MapFile = "", 4, filepath.Join(t.TempDir(), "map")
			p0 := startMount(t, cfg, fuse)
			cfg.Recover, cfg.Version = true, "v1"
			cfg.MetricsSocket = filepath.Join(t.TempDir(), "metrics.sock")
			p1, recovered := startMountLater(t, cfg, true, fuse)
			f, err := os.Create(filepath.Join(h.dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			first := []byte("reached the server\n")
			if _, err := f.Write(first); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			fl.freeze()
			lost := []byte("never reached the server\n")
			if _, err := f.Write(lost); err != nil {
				t.Fatal(err)
			}
			synced := make(chan error, 1)
			if inFlight {
				go func() { synced <- f.Sync() }()
				select {
				case err := <-synced:
					t.Fatalf("fsync returned %v while its WRITE cannot reach the server", err)
				case <-time.After(300 * time.Millisecond):
				}
			}
			if err := p0.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = p0.wait(t, 10*time.Second)
			recovered()
			if !inFlight {
				// the close of another descriptor of the open file (as a
				// fork's close-on-exec) reports the loss too and leaves
				// it to the writer's fsync
				d, err := unix.Dup(int(f.Fd()))
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Close(d); !errorsIsEIO(err) {
					t.Fatalf("close of a duplicate after the recovery: %v, want EIO", err)
				}
				go func() { synced <- f.Sync() }()
			}
			select {
			case err = <-synced:
			case <-time.After(30 * time.Second):
				t.Fatal("fsync stuck after the recovery")
			}
			got, rerr := os.ReadFile(filepath.Join(h.root, "f"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if string(got) != string(first) {
				t.Fatalf("the server's file is %q; the test wants the second write lost", got)
			}
			if !errorsIsEIO(err) {
				t.Fatalf("fsync after the recovery: %v, want EIO: the server lacks the write it covers", err)
			}
			// reported once: the file serves on
			if _, err := f.Write([]byte("after\n")); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatalf("second fsync after the recovery: %v", err)
			}
			checkRecoveryReport(t, p1, cfg.MetricsSocket, inFlight)
		})
	}
}

// checkRecoveryReport checks the recovering process's "handover done"
// line and metrics: the requests the kernel sent again (at least one
// when a request was in flight at the kill, the FSYNC) are the requests
// carried, handled by it.
func checkRecoveryReport(t *testing.T, p *mountProc, sock string, inFlight bool) {
	t.Helper()
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == ""; {
		for _, l := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(l, `"mount: handover done"`) && strings.Contains(l, `direction="recover"`) {
				line = l
			}
		}
		if line == "" && time.Now().After(deadline) {
			t.Fatalf("no handover line of the recovery:\n%s", p.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("recovering process: %s", line)
	carried := -1
	if _, after, ok := strings.Cut(line, "requests_carried="); ok {
		carried, _ = strconv.Atoi(strings.Fields(after)[0])
	}
	handled := -1
	if _, after, ok := strings.Cut(line, "resent_handled="); ok {
		handled, _ = strconv.Atoi(strings.Fields(after)[0])
	}
	if inFlight && (carried < 1 || handled != carried) {
		t.Errorf("requests_carried=%d resent_handled=%d with an FSYNC in flight at the kill; want at least 1, all handled", carried, handled)
	}
	if !strings.Contains(line, `from_version="crashed"`) || !strings.Contains(line, "paused=") {
		t.Errorf("recovery line without its version or pause: %s", line)
	}
	body := scrape(t, sock)
	metric := func(name string) int {
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err == nil {
					return int(f)
				}
			}
		}
		t.Errorf("no metric %s in:\n%s", name, body)
		return -1
	}
	if got := metric(`nfsrdma_mount_handover_carried{kind="requests"}`); got != carried {
		t.Errorf("nfsrdma_mount_handover_carried{kind=\"requests\"} %d, the log says %d", got, carried)
	}
	if got := metric(`nfsrdma_mount_handover_resent{result="handled"}`); got != handled {
		t.Errorf("nfsrdma_mount_handover_resent{result=\"handled\"} %d, the log says %d", got, handled)
	}
	if got := metric(`nfsrdma_mount_handovers_total{direction="recover",result="ok"}`); got != 1 {
		t.Errorf("nfsrdma_mount_handovers_total{direction=\"recover\",result=\"ok\"} %d, want 1", got)
	}
	metric(`nfsrdma_mount_handover_pause_seconds{from_version="crashed"}`)
}
