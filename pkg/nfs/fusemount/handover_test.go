package fusemount

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/lockdtest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// childEnv names the environment variable that makes the test binary a
// `driver mount` process: its value is the JSON of a Config.
const childEnv = "FUSEMOUNT_TEST_CHILD"

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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
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
func startMount(t *testing.T, cfg Config) *mountProc {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.ExtraFiles = []*os.File{pw}
	lb := &strings.Builder{}
	w := &lockedWriter{w: lb}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &mountProc{cmd: cmd, done: make(chan error, 1), log: w}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
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
	line, err := bufio.NewReader(pr).ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		t.Fatalf("mount process: %q %v\n%s", line, err, w.String())
	}
	return p
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
	h       [32]byte
	sum     func() []byte
	written int64
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
	w := &writer{f: f, stop: make(chan struct{}), done: make(chan struct{}), sum: func() []byte { return h.Sum(nil) }}
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
			w.written += int64(len(buf))
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
	before := w.written
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
	if w.written <= before {
		t.Fatalf("no write after the handovers (%d bytes before, %d in all)", before, w.written)
	}
	if got, want := fileSum(t, filepath.Join(h.root, "loop")), w.sum(); string(got) != string(want) {
		t.Fatalf("server's file: sha256 %s, written %s (%d bytes)", hex.EncodeToString(got), hex.EncodeToString(want), w.written)
	}
	t.Logf("%d bytes written and fsynced across 2 handovers; longest write+fsync (the pause seen): %v", w.written, w.longest)
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
