package fusefs

// Fault tests: the export server is killed (SIGKILL) and
// restarted on the same ports in the middle of a large write and a large
// read, it loses the unstable data of a file before COMMIT, it dies or
// hangs under a soft mount; the `driver mount` process is killed. Each
// test checks every byte afterwards, on the server's disk and through a
// mount.
//
// The server is `driver server` run as a child process (faultServer), so
// that a kill is a real process death: its sockets are reset by the
// kernel, its write verifier changes on restart, and the file handles the
// client holds must still work (name_to_handle_at).

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

const (
	// faultBig is the size of the large write and read, 256 MiB.
	faultBig = 256 << 20
	// faultChunk is the size of one write(2) or read(2) of the tests.
	faultChunk = 1 << 20
	// faultHang bounds every wait of these tests: a guard against a hang,
	// never an assertion on speed.
	faultHang = 5 * time.Minute
)

// faultPattern fills b with the test pattern of seed at file offset off
// (both multiples of 8): each 8-byte word is a function of its offset,
// so that any misplaced, lost or stale byte is seen.
func faultPattern(b []byte, off int64, seed uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		x := (uint64(off)+uint64(i))*0x9e3779b97f4a7c15 ^ seed
		x ^= x >> 31
		binary.LittleEndian.PutUint64(b[i:], x)
	}
}

// faultCheck reads size bytes from r and compares them with the pattern
// of seed; it returns an error naming the first differing offset, or a
// short file, or a file longer than size.
func faultCheck(r io.Reader, size int64, seed uint64) error {
	got := make([]byte, 4<<20)
	want := make([]byte, len(got))
	for off := int64(0); off < size; {
		n := int(min(int64(len(got)), size-off))
		if k, err := io.ReadFull(r, got[:n]); err != nil {
			return fmt.Errorf("at %d: read %d of %d bytes: %w", off, k, n, err)
		}
		faultPattern(want[:n], off, seed)
		if !bytes.Equal(got[:n], want[:n]) {
			for i := range n {
				if got[i] != want[i] {
					return fmt.Errorf("byte %d differs: %#x, want %#x", off+int64(i), got[i], want[i])
				}
			}
		}
		off += int64(n)
	}
	if k, err := r.Read(make([]byte, 1)); k != 0 || err != io.EOF {
		return fmt.Errorf("past %d bytes: read %d, %v; want EOF", size, k, err)
	}
	return nil
}

// faultCheckFile is faultCheck of the file at path.
func faultCheckFile(path string, size int64, seed uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := faultCheck(f, size, seed); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// faultWritePattern writes size bytes of the pattern of seed to path in
// faultChunk writes, adding each write's bytes to progress, then closes the
// file. It returns the first error of open, write or close.
func faultWritePattern(path string, size int64, seed uint64, progress *atomic.Int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, faultChunk)
	for off := int64(0); off < size; off += faultChunk {
		faultPattern(buf, off, seed)
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return fmt.Errorf("write at %d: %w", off, err)
		}
		if progress != nil {
			progress.Add(faultChunk)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// faultReadPattern reads path in faultChunk reads, checking each against
// the pattern of seed and adding its bytes to progress.
func faultReadPattern(path string, size int64, seed uint64, progress *atomic.Int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, faultChunk)
	want := make([]byte, faultChunk)
	for off := int64(0); off < size; off += faultChunk {
		if k, err := io.ReadFull(f, got); err != nil {
			return fmt.Errorf("read at %d: %d bytes, %w", off, k, err)
		}
		faultPattern(want, off, seed)
		if !bytes.Equal(got, want) {
			return fmt.Errorf("read at %d: data differs from what was written", off)
		}
		progress.Add(faultChunk)
	}
	if k, err := f.Read(got[:1]); k != 0 || err != io.EOF {
		return fmt.Errorf("past the end: %d bytes, %v; want EOF", k, err)
	}
	return nil
}

// faultWithin runs fn and returns its error, logging how long it took; it
// fails the test when fn has not returned after d (a hung system call on
// the mount).
func faultWithin(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
		return err
	case <-time.After(d):
		t.Fatalf("%s: no answer after %v", what, d)
		return nil
	}
}

// faultWaitProgress waits until progress reaches at least n, failing the
// test if done yields first (the worker ended early) or after faultHang.
func faultWaitProgress(t *testing.T, progress *atomic.Int64, n int64, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(faultHang)
	for progress.Load() < n {
		select {
		case err := <-done:
			t.Fatalf("ended after %d bytes, before %d: %v", progress.Load(), n, err)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes after %v, waiting for %d", progress.Load(), faultHang, n)
		}
	}
}

// faultLog is a goroutine-safe buffer for a child's output.
type faultLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *faultLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *faultLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// faultServer is `driver server` as a child process exporting root on
// fixed loopback ports (NFS and MOUNT over TCP, NFS over RDMA by software
// iWARP), killed and restarted by the test. Its logs are printed when the
// test fails.
//
// The instances are started by a launcher shell started before anything
// is mounted, never by the test process itself: a fork+exec by a process
// with files open on a FUSE mount closes them at exec (close-on-exec), and
// each such close is a FUSE FLUSH, which on a hard mount waits for the
// very server being started.
type faultServer struct {
	t                            *testing.T
	bin, root, logDir            string
	nfsPort, mountPort, rdmaPort int

	sh    *exec.Cmd
	shIn  io.WriteCloser
	pids  chan string // PIDs printed by the launcher
	shEnd chan struct{}
	pid   int      // of the running instance, 0 if none
	logs  []string // log file of every instance, in order
}

// startFaultServer starts the server on new ports over a new directory;
// it is killed at the end of the test.
func startFaultServer(t *testing.T) *faultServer {
	t.Helper()
	s := &faultServer{t: t, bin: testenv.Driver(t, false), root: t.TempDir(), logDir: t.TempDir()}
	ports := map[int]bool{}
	for len(ports) < 3 {
		ports[testenv.FreePort(t)] = true
	}
	var ps []int
	for p := range ports {
		ps = append(ps, p)
	}
	s.nfsPort, s.mountPort, s.rdmaPort = ps[0], ps[1], ps[2]
	// Each line read is the log file of a new instance; the launcher
	// answers with its PID.
	s.sh = exec.Command("/bin/sh", "-c", `while read -r log; do "$@" >"$log" 2>&1 & echo $!; done`, "launcher",
		s.bin, "server", "--root", s.root, "--export", "/:127.0.0.1:rw,no_root_squash", "--listen", "127.0.0.1",
		"--nfs-port", strconv.Itoa(s.nfsPort), "--mount-port", strconv.Itoa(s.mountPort),
		"--rdma-port", strconv.Itoa(s.rdmaPort), "--state-dir", "")
	var err error
	if s.shIn, err = s.sh.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sh.Start(); err != nil {
		t.Fatal(err)
	}
	s.pids, s.shEnd = make(chan string, 1), make(chan struct{})
	go func() {
		defer close(s.shEnd)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.pids <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		s.kill()
		s.shIn.Close()
		select {
		case <-s.shEnd:
			_ = s.sh.Wait()
		case <-time.After(time.Minute):
			t.Error("launcher shell did not end")
			_ = s.sh.Process.Kill()
		}
		if t.Failed() {
			for i, l := range s.logs {
				b, _ := os.ReadFile(l)
				t.Logf("driver server instance %d:\n%s", i+1, b)
			}
		}
	})
	s.start()
	return s
}

// faultProcState returns the state letter of process pid (R, S, T, Z,
// ...; 0 when there is no such process).
func faultProcState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// faultAlive reports whether pid runs (a zombie does not).
func faultAlive(pid int) bool {
	st := faultProcState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// start starts an instance and waits until it serves NFS over TCP and
// RDMA and MOUNT. An instance that exits at once (a port still held by the
// previous one) is started again, for at most 30 s.
func (s *faultServer) start() {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		log := filepath.Join(s.logDir, fmt.Sprintf("server-%d.log", len(s.logs)+1))
		s.logs = append(s.logs, log)
		if _, err := fmt.Fprintln(s.shIn, log); err != nil {
			s.t.Fatal("launcher:", err)
		}
		var pid int
		select {
		case line := <-s.pids:
			var err error
			if pid, err = strconv.Atoi(line); err != nil {
				s.t.Fatalf("launcher printed %q", line)
			}
		case <-time.After(time.Minute):
			s.t.Fatal("launcher did not start the server")
		}
		s.pid = pid
		for {
			b, _ := os.ReadFile(log)
			if bytes.Contains(b, []byte(`"nfs server: serving" `)) && bytes.Contains(b, []byte(`"nfs server: serving NFS over RDMA"`)) {
				return
			}
			if !faultAlive(pid) {
				break
			}
			if time.Now().After(deadline) {
				s.kill()
				s.t.Fatalf("driver server not serving after 30 s:\n%s", b)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.pid = 0
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log)
			s.t.Fatalf("driver server exits at start:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill kills the running instance with SIGKILL and waits until it is
// dead (its sockets closed).
func (s *faultServer) kill() {
	if s.pid == 0 {
		return
	}
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	deadline := time.Now().Add(time.Minute)
	for faultAlive(s.pid) {
		if time.Now().After(deadline) {
			s.t.Errorf("driver server (pid %d) still running a minute after SIGKILL", s.pid)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.pid = 0
}

// signal sends sig (SIGSTOP, SIGCONT) to the running instance; for
// SIGSTOP it waits until every thread of it is stopped (a thread on the
// other CPU could otherwise still answer a call or two).
func (s *faultServer) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := syscall.Kill(s.pid, sig); err != nil {
		s.t.Fatal(err)
	}
	if sig != syscall.SIGSTOP {
		return
	}
	task := "/proc/" + strconv.Itoa(s.pid) + "/task"
	deadline := time.Now().Add(time.Minute)
	for {
		ents, err := os.ReadDir(task)
		if err != nil {
			s.t.Fatal(err)
		}
		stopped := 0
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			b, _ := os.ReadFile(task + "/" + e.Name() + "/stat")
			if i := bytes.LastIndexByte(b, ')'); tid > 0 && i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
				stopped++
			}
		}
		if stopped == len(ents) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("driver server: %d of %d threads stopped a minute after SIGSTOP", stopped, len(ents))
		}
		time.Sleep(time.Millisecond)
	}
}

// ts describes the server for testServer.mount (in-process FUSE mounts).
func (s *faultServer) ts() *testServer {
	return &testServer{root: s.root, nfsPort: s.nfsPort, mountPort: s.mountPort, rdmaPort: s.rdmaPort}
}

// TestFaultServerRestartMidWrite writes 256 MiB through a hard mount and
// kills (SIGKILL) and restarts the export server after a quarter of it:
// write(2) and close(2) see no error, and every byte is on the server's
// disk and reads back through a new mount.
func TestFaultServerRestartMidWrite(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startFaultServer(t)
			dir, m := srv.ts().mount(t, proto, "")
			const seed = 11
			var written atomic.Int64
			done := make(chan error, 1)
			go func() { done <- faultWritePattern(filepath.Join(dir, "big"), faultBig, seed, &written) }()
			faultWaitProgress(t, &written, faultBig/4, done)
			srv.kill()
			at := written.Load()
			srv.start()
			if at >= faultBig {
				t.Fatalf("all %d bytes were written before the server was killed: nothing was tested", at)
			}
			t.Logf("server killed and restarted after %d MiB of %d written", at>>20, faultBig>>20)
			if err := faultWithin(t, faultHang, "writer", func() error { return <-done }); err != nil {
				t.Fatal("writer through the hard mount:", err)
			}
			if err := faultCheckFile(filepath.Join(srv.root, "big"), faultBig, seed); err != nil {
				t.Fatal("on the server's disk:", err)
			}
			dir2, _ := srv.ts().mount(t, proto, "")
			if err := faultWithin(t, faultHang, "read back", func() error {
				return faultCheckFile(filepath.Join(dir2, "big"), faultBig, seed)
			}); err != nil {
				t.Fatal("through a new mount:", err)
			}
			st, ws := m.Client.Stats(), m.Client.WriteStats()
			t.Logf("client: %+v, %+v", st, ws)
			if st.Reconnects == 0 {
				t.Error("the client never reconnected: the server restart was not seen")
			}
		})
	}
}

// TestFaultServerRestartMidRead reads a 256 MiB file through a hard mount
// and kills and restarts the export server after a quarter of it: every
// read(2) succeeds with the right bytes.
func TestFaultServerRestartMidRead(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startFaultServer(t)
			const seed = 12
			if err := faultWritePattern(filepath.Join(srv.root, "big"), faultBig, seed, nil); err != nil {
				t.Fatal(err)
			}
			dir, m := srv.ts().mount(t, proto, "")
			var read atomic.Int64
			done := make(chan error, 1)
			go func() { done <- faultReadPattern(filepath.Join(dir, "big"), faultBig, seed, &read) }()
			faultWaitProgress(t, &read, faultBig/4, done)
			srv.kill()
			at := read.Load()
			srv.start()
			if at >= faultBig {
				t.Fatalf("all %d bytes were read before the server was killed: nothing was tested", at)
			}
			t.Logf("server killed and restarted after %d MiB of %d read", at>>20, faultBig>>20)
			if err := faultWithin(t, faultHang, "reader", func() error { return <-done }); err != nil {
				t.Fatal("reader through the hard mount:", err)
			}
			st := m.Client.Stats()
			t.Logf("client: %+v", st)
			if st.Reconnects == 0 {
				t.Error("the client never reconnected: the server restart was not seen")
			}
		})
	}
}

// TestFaultWriteVerifierChange writes 8 MiB UNSTABLE (acknowledged, not
// yet committed), then the server crashes and loses that data (killed,
// and the file truncated on its disk as a crash before write-back would
// leave it) and comes back with a new write verifier. fsync(2) and
// close(2) must succeed, and the file on the server must be complete:
// the client saw the verifier change at COMMIT and re-sent the data.
func TestFaultWriteVerifierChange(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startFaultServer(t)
			dir, m := srv.ts().mount(t, proto, "")
			const size, seed = 8 << 20, 13
			data := make([]byte, size)
			faultPattern(data, 0, seed)
			f, err := os.Create(filepath.Join(dir, "unstable"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			for off := 0; off < size; off += faultChunk {
				if _, err := f.Write(data[off : off+faultChunk]); err != nil {
					t.Fatal(err)
				}
			}
			// Wait until the server acknowledged every WRITE: all of it
			// is then UNSTABLE data the client keeps, none committed
			// (below the per-file and per-mount bounds).
			b := m.sys.budget
			deadline := time.Now().Add(faultHang)
			for {
				b.mu.Lock()
				inflight, dirty := b.inflight, b.dirty
				b.mu.Unlock()
				if inflight == 0 {
					if dirty != size {
						t.Fatalf("%d bytes acknowledged UNSTABLE, want %d", dirty, size)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d bytes still in flight after %v", inflight, faultHang)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if ws := m.Client.WriteStats(); ws != (client.WriteStats{}) {
				t.Fatalf("before the restart: %+v", ws)
			}
			srv.kill()
			// The crash lost what was only in the server's memory.
			if err := os.Truncate(filepath.Join(srv.root, "unstable"), 0); err != nil {
				t.Fatal(err)
			}
			srv.start()
			if err := faultWithin(t, faultHang, "fsync", f.Sync); err != nil {
				t.Fatal("fsync after the server lost the unstable data:", err)
			}
			if err := faultWithin(t, faultHang, "close", f.Close); err != nil {
				t.Fatal("close:", err)
			}
			if disk, err := os.ReadFile(filepath.Join(srv.root, "unstable")); err != nil || !bytes.Equal(disk, data) {
				t.Fatalf("on the server's disk after fsync: %d bytes (%v), want the %d written", len(disk), err, size)
			}
			ws := m.Client.WriteStats()
			t.Logf("client: %+v, %+v", m.Client.Stats(), ws)
			if ws.VerifierChanges == 0 || ws.ResentBytes != size {
				t.Errorf("write verifier change not handled as expected: %+v, want >= 1 change and %d bytes re-sent", ws, size)
			}
		})
	}
}

// TestFaultSoftMount takes the server away under a soft mount
// (timeo=0.2 s, retrans=2), killed or hung (SIGSTOP, the connection still
// up): LOOKUP, OPEN and a write-behind write fail with EIO, within a
// bound, instead of waiting for the server; the failed write is reported
// by close(2). When the server is back, the same mount works again.
func TestFaultSoftMount(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		for _, how := range []string{"killed", "hung"} {
			t.Run(proto+"/"+how, func(t *testing.T) {
				srv := startFaultServer(t)
				dir, m := srv.ts().mount(t, proto, "soft,timeo=2,retrans=2,actimeo=0")
				if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("kept"), 0o644); err != nil {
					t.Fatal(err)
				}
				w, err := os.Create(filepath.Join(dir, "w"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Close() })
				if how == "killed" {
					srv.kill()
				} else {
					srv.signal(syscall.SIGSTOP)
					t.Cleanup(func() {
						if srv.pid != 0 {
							_ = syscall.Kill(srv.pid, syscall.SIGCONT)
						}
					})
				}
				// 3 tries of 0.2 s each (or refused dials): a soft mount
				// answers well within the guard; a hard one never would.
				const bound = time.Minute
				err = faultWithin(t, bound, "stat", func() error {
					_, err := os.Stat(filepath.Join(dir, "absent"))
					return err
				})
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("stat with the server %s: %v, want EIO", how, err)
				}
				err = faultWithin(t, bound, "open", func() error {
					_, err := os.ReadFile(filepath.Join(dir, "kept"))
					return err
				})
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("open with the server %s: %v, want EIO", how, err)
				}
				var werr error
				cerr := faultWithin(t, bound, "write and close", func() error {
					_, werr = w.Write(bytes.Repeat([]byte{7}, faultChunk))
					return w.Close()
				})
				if (werr != nil && !errors.Is(werr, syscall.EIO)) || (werr == nil && !errors.Is(cerr, syscall.EIO)) {
					t.Fatalf("write with the server %s: write %v, close %v; want EIO from one of them", how, werr, cerr)
				}
				t.Logf("server %s: write %v, close %v; client %+v", how, werr, cerr, m.Client.Stats())
				if how == "killed" {
					srv.start()
				} else {
					srv.signal(syscall.SIGCONT)
				}
				// The mount recovers: the old file reads, new ones write.
				var got []byte
				if err := faultWithin(t, bound, "read after", func() (err error) {
					got, err = os.ReadFile(filepath.Join(dir, "kept"))
					return err
				}); err != nil || string(got) != "kept" {
					t.Fatalf("read with the server back: %q, %v", got, err)
				}
				// (A new file: a WRITE given up on may still be
				// executed by the resumed server, as with any soft mount.)
				data := bytes.Repeat([]byte("after"), 100000)
				if err := faultWithin(t, bound, "write after", func() error {
					return os.WriteFile(filepath.Join(dir, "after"), data, 0o644)
				}); err != nil {
					t.Fatal("write with the server back:", err)
				}
				if disk, err := os.ReadFile(filepath.Join(srv.root, "after")); err != nil || !bytes.Equal(disk, data) {
					t.Fatalf("on the server's disk: %d bytes (%v), want %d", len(disk), err, len(data))
				}
			})
		}
	}
}

// faultMountProc is a `driver mount` child process.
type faultMountProc struct {
	cmd    *exec.Cmd
	out    *faultLog
	exited chan error
}

// startFaultMount runs `driver mount -o opts 127.0.0.1:/ dir` and waits
// until dir is mounted. At the end of the test the process is killed and
// dir detached if still mounted.
func startFaultMount(t *testing.T, bin, opts, dir string) *faultMountProc {
	t.Helper()
	p := &faultMountProc{out: &faultLog{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "mount", "-o", opts, "127.0.0.1:/", dir)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if mounted(t, dir) {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		if t.Failed() {
			t.Logf("driver mount (pid %d):\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !mounted(t, dir) {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("driver mount exited: %v\n%s", err, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not mounted after 30 s\n%s", dir, p.out.String())
		}
	}
	return p
}

// wait waits for the process to exit and returns its error.
func (p *faultMountProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(time.Minute):
		t.Fatalf("driver mount (pid %d) still running after a minute", p.cmd.Process.Pid)
		return nil
	}
}

// TestFaultKilledMountProcess kills (SIGKILL) the `driver mount` process
// serving a mount: the mount point then fails with ENOTCONN, umount(2)
// clears it, and a new `driver mount` on the same directory works and
// shows the data fsync'ed before the kill.
func TestFaultKilledMountProcess(t *testing.T) {
	needFUSE(t)
	bin := testenv.Driver(t, false)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t)
			port := srv.nfsPort
			if proto == mountopts.ProtoRDMA {
				port = srv.rdmaPort
			}
			opts := fmt.Sprintf("proto=%s,port=%d,mountport=%d", proto, port, srv.mountPort)
			dir := t.TempDir()
			p := startFaultMount(t, bin, opts, dir)
			const size, seed = 4 << 20, 14
			data := make([]byte, size)
			faultPattern(data, 0, seed)
			err := faultWithin(t, faultHang, "write and fsync", func() error {
				f, err := os.Create(filepath.Join(dir, "synced"))
				if err != nil {
					return err
				}
				defer f.Close()
				if _, err := f.Write(data); err != nil {
					return err
				}
				return f.Sync()
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			var ee *exec.ExitError
			if err := p.wait(t); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("driver mount after SIGKILL: %v", err)
			}
			// The FUSE connection is gone: the mount point answers ENOTCONN
			// (a listing: a stat may be answered from the kernel's
			// attribute cache without asking the connection)
			if _, err := os.ReadDir(dir); !errors.Is(err, syscall.ENOTCONN) {
				t.Fatalf("listing the mount point of a killed mount process: %v, want ENOTCONN", err)
			}
			if _, err := os.ReadFile(filepath.Join(dir, "synced")); !errors.Is(err, syscall.ENOTCONN) {
				t.Fatalf("read on the mount of a killed mount process: %v, want ENOTCONN", err)
			}
			if !mounted(t, dir) {
				t.Fatal("the mount of the killed process left the mount table by itself")
			}
			if err := syscall.Unmount(dir, 0); err != nil {
				t.Fatal("umount of the dead mount:", err)
			}
			if mounted(t, dir) {
				t.Fatal("still mounted after umount")
			}
			// Mount again on the same directory.
			p2 := startFaultMount(t, bin, opts, dir)
			if err := faultWithin(t, faultHang, "read back", func() error {
				return faultCheckFile(filepath.Join(dir, "synced"), size, seed)
			}); err != nil {
				t.Fatal("after mounting again:", err)
			}
			if err := faultWithin(t, faultHang, "write again", func() error {
				return os.WriteFile(filepath.Join(dir, "again"), []byte("again"), 0o644)
			}); err != nil {
				t.Fatal("write after mounting again:", err)
			}
			if got, err := os.ReadFile(filepath.Join(srv.root, "again")); err != nil || string(got) != "again" {
				t.Fatalf("on the server's disk: %q, %v", got, err)
			}
			if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p2.wait(t); err != nil {
				t.Fatalf("driver mount after SIGTERM: %v\n%s", err, p2.out.String())
			}
			if mounted(t, dir) {
				t.Fatal("still mounted after the mount process ended")
			}
		})
	}
}

// TestFaultReadOnlyCloseWhileServerHung: under a hard mount with the
// server hung (SIGSTOP) and a write of the file still in flight, closing
// a descriptor opened read-only returns at once (it has nothing to write
// back, as with Linux NFS), while the writer's close waits for the server
// and succeeds once it is back, the data on its disk.
func TestFaultReadOnlyCloseWhileServerHung(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startFaultServer(t)
			dir, _ := srv.ts().mount(t, proto, "")
			path := filepath.Join(dir, "f")
			w, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			r, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			srv.signal(syscall.SIGSTOP)
			resumed := false
			t.Cleanup(func() {
				if !resumed {
					_ = syscall.Kill(srv.pid, syscall.SIGCONT)
				}
			})
			data := make([]byte, faultChunk)
			faultPattern(data, 0, 15)
			if _, err := w.Write(data); err != nil { // write-behind: the WRITE waits for the server
				t.Fatal(err)
			}
			// A hang guard, not a speed bound: a close of a read-only
			// descriptor that flushed the other descriptor's writes would
			// wait for the server, which stays stopped.
			if err := faultWithin(t, 20*time.Second, "close of the read-only descriptor", r.Close); err != nil {
				t.Fatal(err)
			}
			resumed = true
			srv.signal(syscall.SIGCONT)
			if err := faultWithin(t, faultHang, "close of the writer", w.Close); err != nil {
				t.Fatal("close of the writer:", err)
			}
			if disk, err := os.ReadFile(filepath.Join(srv.root, "f")); err != nil || !bytes.Equal(disk, data) {
				t.Fatalf("on the server's disk: %d bytes (%v), want %d", len(disk), err, len(data))
			}
		})
	}
}
