package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// hidden lists the silly-renamed (".nfs*") names in dir.
func hidden(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".nfs") {
			h = append(h, e.Name())
		}
	}
	return h
}

// waitNoHidden waits for the REMOVE that follows the last close (RELEASE
// reaches the file system after close(2) returns).
func waitNoHidden(t *testing.T, dirs ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, d := range dirs {
			n += len(hidden(t, d))
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("silly-renamed files left after the last close: %v", hidden(t, dirs[0]))
		}
	}
}

// TestSillyRename: a file unlinked (or replaced by a rename) while open
// stays usable through its descriptors, as on a Linux NFS mount: it is
// renamed to a hidden .nfs name and removed at the last close. A file
// with another link, or not open, is removed at once.
func TestSillyRename(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t)
			dir, _ := srv.mount(t, proto, "")
			data := bytes.Repeat([]byte("open but unlinked "), 100000) // 1.8 MB

			// unlink while open for reading and writing
			p := filepath.Join(dir, "tmp")
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal("unlink of an open file:", err)
			}
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("stat after unlink: %v", err)
			}
			if h := hidden(t, dir); len(h) != 1 || len(h[0]) != len(".nfs")+24 {
				t.Fatalf("hidden names while open: %v", h)
			}
			if _, err := f.WriteAt([]byte("MORE"), int64(len(data))); err != nil {
				t.Fatal("write after unlink:", err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal("fsync after unlink:", err)
			}
			// drop the kernel's pages: the read below goes to the server
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data)+4)
			if n, err := f.ReadAt(got, 0); n != len(got) || !bytes.Equal(got, append(append([]byte{}, data...), "MORE"...)) {
				t.Fatalf("read after unlink: %d bytes, %v", n, err)
			}
			if st, err := f.Stat(); err != nil || st.Size() != int64(len(data)+4) {
				t.Fatalf("fstat after unlink: %v, %v", st, err)
			}
			f.Close()
			waitNoHidden(t, dir)
			if ents, _ := os.ReadDir(srv.root); len(ents) != 0 {
				t.Fatalf("left on the server: %v", ents)
			}

			// a directory holding a hidden name cannot be removed, nor the
			// hidden name while its file is open (EBUSY, as Linux)
			sub := filepath.Join(dir, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sub, "x"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			x, err := os.Open(filepath.Join(sub, "x"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(sub, "x")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Rmdir(sub); err != syscall.ENOTEMPTY {
				t.Fatalf("rmdir of a directory holding an open, unlinked file: %v, want ENOTEMPTY", err)
			}
			h := hidden(t, sub)
			if len(h) != 1 {
				t.Fatalf("hidden names in sub: %v", h)
			}
			if err := syscall.Unlink(filepath.Join(sub, h[0])); err != syscall.EBUSY {
				t.Fatalf("unlink of the hidden name of an open file: %v, want EBUSY", err)
			}
			x.Close()
			waitNoHidden(t, sub)
			if err := syscall.Rmdir(sub); err != nil {
				t.Fatal("rmdir after the last close:", err)
			}

			// a rename over an open target keeps the target's data for its
			// readers
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(a, []byte("new contents"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, data, 0o644); err != nil {
				t.Fatal(err)
			}
			old, err := os.Open(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(a, b); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(b); err != nil || string(got) != "new contents" {
				t.Fatalf("renamed file: %q, %v", got, err)
			}
			if err := unix.Fadvise(int(old.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			got = make([]byte, len(data))
			if n, err := old.ReadAt(got, 0); n != len(data) || !bytes.Equal(got, data) {
				t.Fatalf("read of the replaced file through its descriptor: %d bytes, %v", n, err)
			}
			old.Close()
			waitNoHidden(t, dir)

			// two links: the other name keeps the file, nothing hidden
			c, d := filepath.Join(dir, "c"), filepath.Join(dir, "d")
			if err := os.WriteFile(c, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(c, d); err != nil {
				t.Fatal(err)
			}
			g, err := os.Open(c)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if err := os.Remove(c); err != nil {
				t.Fatal(err)
			}
			if h := hidden(t, dir); len(h) != 0 {
				t.Fatalf("hidden name for a file with another link: %v", h)
			}
			if got, err := os.ReadFile(d); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("other link: %d bytes, %v", len(got), err)
			}
		})
	}
}

// slowReads delays every NFS READ by d (so that read-ahead READs are in
// flight when a reader closes) and counts the READs in flight.
type slowReads struct {
	sunrpc.ClientTransport
	d        time.Duration
	inFlight atomic.Int32
}

func (s *slowReads) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	if proc, ok := nfsProc(c); ok && proc == nfs3.ProcRead {
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		time.Sleep(s.d)
	}
	return s.ClientTransport.RoundTrip(ctx, c)
}

// TestCloseThenUnlink: a file closed and at once unlinked, or its
// directory removed (rm -rf), is removed, not silly-renamed, although
// FUSE sends the RELEASE after close(2) returned and holds it while
// read-ahead READs of the file are in flight, so that the UNLINK comes
// first (sharedFile.awaitRelease); otherwise rm -rf would fail with
// ENOTEMPTY on the hidden name. A file whose close we saw but that another descriptor
// (dup(2)) keeps open is still silly-renamed, after at most ReleaseWait,
// and stays readable through that descriptor.
func TestCloseThenUnlink(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	pc := newProcCount()
	var sr *slowReads
	wrap := wrapConns(func(ct sunrpc.ClientTransport) sunrpc.ClientTransport {
		sr = &slowReads{ClientTransport: ct, d: 2 * ReleaseWait} // past the short wait
		return pc.conn(sr)
	})
	dir, _ := s.mountWith(t, mountopts.ProtoRDMA, "", wrap)
	data := bytes.Repeat([]byte("read ahead then removed "), 350000) // 8.4 MB
	probed := 0
	for i := 0; probed < 3 && i < 30; i++ {
		// made on the server, not through the mount (which would
		// trust its own listing of the directory: dirnames.go)
		name := fmt.Sprintf("d%d", i)
		if err := os.Mkdir(filepath.Join(s.root, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.root, name, "big"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(dir, name)
		f, err := os.Open(filepath.Join(sub, "big"))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for k := 0; k < 20; k++ { // 1.25 MiB: past the first read-ahead window
			if _, err := io.ReadFull(f, buf); err != nil {
				t.Fatal(err)
			}
		}
		if sr.inFlight.Load() > 0 {
			probed++
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(sub); err != nil {
			t.Fatalf("rm -rf right after close: %v (hidden names: %v)", err, hidden(t, sub))
		}
	}
	if probed == 0 {
		t.Fatal("no close came with read-ahead READs in flight: the test did not probe the race")
	}
	if n := pc.get(nfs3.ProcRename); n != 0 {
		t.Fatalf("%d RENAMEs (silly renames) for files closed before their unlink", n)
	}

	// A descriptor dup(2)ed before the close keeps the file open.
	p := filepath.Join(dir, "dup")
	if err := os.WriteFile(p, []byte("still open"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ReleaseWait+5*time.Second {
		t.Errorf("unlink took %v; the wait for a RELEASE is bounded by %v", took, ReleaseWait)
	}
	if h := hidden(t, dir); len(h) != 1 || pc.get(nfs3.ProcRename) != 1 {
		t.Fatalf("hidden names %v, %d RENAMEs: want the open file silly-renamed", h, pc.get(nfs3.ProcRename))
	}
	got := make([]byte, 64)
	k, err := unix.Pread(fd, got, 0)
	if err != nil || string(got[:k]) != "still open" {
		t.Fatalf("read through the dup after unlink: %q, %v", got[:k], err)
	}
	unix.Close(fd)
	waitNoHidden(t, dir)
}

// holdRename is a sunrpc.ClientTransport that holds the first NFS RENAME
// it carries: it closes entered when the RENAME arrives and sends it on
// only when proceed is closed.
type holdRename struct {
	sunrpc.ClientTransport
	held             atomic.Bool
	entered, proceed chan struct{}
}

func (h *holdRename) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	if proc, ok := nfsProc(c); ok && proc == nfs3.ProcRename && h.held.CompareAndSwap(false, true) {
		close(h.entered)
		select {
		case <-h.proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.ClientTransport.RoundTrip(ctx, c)
}

// TestSillyRenamePutBack: when the last descriptor of a file is closed
// while the silly RENAME its unlink started is in flight (the RELEASE
// comes between that RPC and its reply), no RELEASE is left to remove the
// hidden name, so the unlink renames it back and removes the file itself:
// nothing is left on the server, the name is gone through the mount and
// on the server, and it can be created again. Before this was tested
// only by chance: the RELEASE must come between the RENAME and its reply,
// here held by the transport until the RELEASE has been seen.
func TestSillyRenamePutBack(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	pc := newProcCount()
	hr := &holdRename{entered: make(chan struct{}), proceed: make(chan struct{})}
	wrap := wrapConns(func(ct sunrpc.ClientTransport) sunrpc.ClientTransport {
		hr.ClientTransport = ct
		return pc.conn(hr)
	})
	dir, m := s.mountWith(t, mountopts.ProtoRDMA, "", wrap)
	d := filepath.Join(dir, "made") // made through the mount: its names are known
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, "victim")
	if err := os.WriteFile(p, []byte("closed during its silly rename"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p) // open and not closing: the unlink does not wait
	if err != nil {
		t.Fatal(err)
	}
	cn, ok := m.sys.root.GetChild("made").GetChild("victim").Operations().(*node)
	if !ok {
		t.Fatal("no node for the file")
	}
	unlinked := make(chan error, 1)
	go func() { unlinked <- os.Remove(p) }()
	select {
	case <-hr.entered:
	case err := <-unlinked:
		t.Fatalf("unlink ended (%v) without a silly RENAME of the open file", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no silly RENAME within 10 s of the unlink")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// RELEASE reaches the mount after close(2) returned
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sh := cn.shared.Load()
		sh.mu.Lock()
		opens := sh.opens
		sh.mu.Unlock()
		if opens == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file still has %d open files 10 s after its last close", opens)
		}
	}
	close(hr.proceed)
	select {
	case err := <-unlinked:
		if err != nil {
			t.Fatalf("unlink: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("unlink did not end within 10 s of the RENAME's reply")
	}
	if got := pc.get(nfs3.ProcRename); got != 2 {
		t.Errorf("%d RENAMEs, want 2 (away to the hidden name, and back)", got)
	}
	if got := pc.get(nfs3.ProcRemove); got != 1 {
		t.Errorf("%d REMOVEs, want 1", got)
	}
	ents, err := os.ReadDir(filepath.Join(s.root, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("left on the server: %v", ents)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lstat of the unlinked name through the mount: %v, want ENOENT", err)
	}
	// in a directory the mount made, whose names it knows
	g, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("exclusive create of the name again: %v", err)
	}
	g.Close()
	if h := hidden(t, d); len(h) != 0 {
		t.Errorf("hidden names left: %v", h)
	}
}
