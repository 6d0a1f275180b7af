package fusefs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// TestFileSystem runs the kernel (os calls on the mount point) against our
// export server through the FUSE layer, over TCP and over RPC-over-RDMA.
func TestFileSystem(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t)
			dir, m := srv.mount(t, proto, "")
			testFiles(t, dir, srv.root)
			testNamespace(t, dir, srv.root)
			testReaddir(t, dir, m, 1000)
			testWriteErrorAtClose(t, dir, srv.root)
			testMisc(t, dir)
			b := m.sys.budget
			b.mu.Lock()
			if b.inflight != 0 || b.dirty != 0 || len(b.dirtyFiles) != 0 {
				t.Errorf("write budget not back to zero after every file was closed: %d in flight, %d dirty, %d dirty files",
					b.inflight, b.dirty, len(b.dirtyFiles))
			}
			b.mu.Unlock()
			if m := srv.rdma.Metrics(); proto == mountopts.ProtoRDMA && (m.Calls < 100 || m.ReadChunks+m.PositionZeroChunks == 0 || m.WriteChunks == 0) {
				t.Errorf("RPC-over-RDMA not used as expected: %+v", m)
			} else if proto == mountopts.ProtoTCP && m.Calls != 0 {
				t.Errorf("RDMA calls over a TCP mount: %+v", m)
			}
		})
	}
}

func testFiles(t *testing.T, dir, onDisk string) {
	// Small files, byte-exact, and visible on the server's disk.
	for i, n := range []int{0, 1, 4095, 4096, 65537} {
		name := "small" + strconv.Itoa(i)
		data := randBytes(n, uint64(i))
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back %d bytes (%v), want %d", name, len(got), err, n)
		}
		disk, err := os.ReadFile(filepath.Join(onDisk, name))
		if err != nil || !bytes.Equal(disk, data) {
			t.Fatalf("%s on the server's disk: %d bytes (%v)", name, len(disk), err)
		}
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() != int64(n) || st.Mode() != 0o640 {
			t.Fatalf("%s: stat %v, %v", name, st, err)
		}
	}

	// 64 MiB, written in 1 MiB writes, read back in odd-sized reads.
	big := randBytes(64<<20, 99)
	path := filepath.Join(dir, "big")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(big); off += 1 << 20 {
		if _, err := f.Write(big[off : off+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != int64(len(big)) {
		t.Fatalf("big: stat %v, %v", st, err)
	}
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(big))
	for off := 0; off < len(got); {
		k, err := f.Read(got[off:min(off+3<<20+17, len(got))])
		off += k
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if k, err := f.Read(make([]byte, 10)); k != 0 || err != io.EOF {
		t.Fatalf("read past the end: %d, %v", k, err)
	}
	f.Close()
	if !bytes.Equal(got, big) {
		t.Fatal("big: read back differs")
	}
	disk, err := os.ReadFile(filepath.Join(onDisk, "big"))
	if err != nil || !bytes.Equal(disk, big) {
		t.Fatalf("big on the server's disk: %d bytes, %v", len(disk), err)
	}

	// Overwrite in the middle, then read through the same descriptor.
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte{0xa5}, 10000)
	if _, err := rw.WriteAt(patch, 5<<20+3); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(patch))
	if _, err := rw.ReadAt(back, 5<<20+3); err != nil || !bytes.Equal(back, patch) {
		t.Fatalf("read after write: %v", err)
	}
	if err := rw.Sync(); err != nil {
		t.Fatal("fsync:", err)
	}
	rw.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	// chmod, truncate, utimes (mode 0 stays 0).
	p := filepath.Join(dir, "small4")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Size() != 1000 || st.Mode().Perm() != 0 || !st.ModTime().Equal(when) {
		t.Fatalf("after chmod/truncate/utimes: %v %v %v %v", st.Size(), st.Mode(), st.ModTime(), err)
	}
	dst, err := os.Stat(filepath.Join(onDisk, "small4"))
	if err != nil || dst.Size() != 1000 || dst.Mode().Perm() != 0 || !dst.ModTime().Equal(when) {
		t.Fatalf("on disk: %v %v", dst, err)
	}
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Sys().(*syscall.Stat_t).Uid != 1234 || st.Sys().(*syscall.Stat_t).Gid != 5678 {
		t.Fatalf("chown: %+v", st.Sys())
	}
}

func testNamespace(t *testing.T, dir, onDisk string) {
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Fatalf("mkdir: %v %v", st, err)
	}
	if err := os.Mkdir(d, 0o755); !errors.Is(err, os.ErrExist) {
		t.Fatalf("mkdir twice: %v", err)
	}
	// Exclusive create.
	f, err := os.OpenFile(filepath.Join(d, "x"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x-data")
	f.Close()
	if _, err := os.OpenFile(filepath.Join(d, "x"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL on existing: %v", err)
	}
	if err := syscall.Rmdir(d); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	// Symlink and readlink.
	if err := os.Symlink("d/x", filepath.Join(dir, "sl")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "sl")); err != nil || got != "d/x" {
		t.Fatalf("readlink: %q %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "sl")); err != nil || string(got) != "x-data" {
		t.Fatalf("through symlink: %q %v", got, err)
	}
	// Hard link: same inode, link count 2.
	if err := os.Link(filepath.Join(d, "x"), filepath.Join(dir, "hl")); err != nil {
		t.Fatal(err)
	}
	s1, _ := os.Stat(filepath.Join(d, "x"))
	s2, err := os.Stat(filepath.Join(dir, "hl"))
	if err != nil || !os.SameFile(s1, s2) || s2.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("hard link: %v %v", s2, err)
	}
	// Rename over an existing file.
	if err := os.WriteFile(filepath.Join(dir, "target"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "src"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "src"), filepath.Join(dir, "target")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "target")); err != nil || string(got) != "new" {
		t.Fatalf("after rename: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "src")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("renamed source: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(onDisk, "target")); err != nil || string(got) != "new" {
		t.Fatalf("on disk after rename: %q %v", got, err)
	}
	// Unlink, rmdir.
	for _, p := range []string{"hl", "sl", "target", "d/x"} {
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove missing: %v", err)
	}
	if err := os.Remove(d); err != nil {
		t.Fatal("rmdir:", err)
	}
	if _, err := os.Stat(filepath.Join(onDisk, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rmdir on disk: %v", err)
	}
}

func testReaddir(t *testing.T, dir string, m *Mount, n int) {
	d := filepath.Join(dir, "many")
	want := makeEntries(t, d, n)
	calls := m.Client.Stats().Calls
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
		if !e.Type().IsRegular() {
			t.Fatalf("%s: type %v", e.Name(), e.Type())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("readdir: %d names, want %d", len(got), len(want))
	}
	// ls -l: stat of entries (answered from the READDIRPLUS results or
	// the kernel's cache): far fewer NFS calls than entries.
	for _, name := range want[:50] {
		if _, err := os.Lstat(filepath.Join(d, name)); err != nil {
			t.Fatal(err)
		}
	}
	used := m.Client.Stats().Calls - calls
	t.Logf("listing %d entries and 50 lstat: %d NFS calls", n, used)
	if used > uint64(n/10) {
		t.Errorf("listing %d entries and 50 lstat took %d NFS calls", n, used)
	}
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
}

// testWriteErrorAtClose removes a file on the server while it is open
// for writing: the background WRITE fails (ESTALE) and close reports it.
func testWriteErrorAtClose(t *testing.T, dir, onDisk string) {
	f, err := os.Create(filepath.Join(dir, "doomed"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(onDisk, "doomed")); err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write(make([]byte, 1<<20))
	cerr := f.Close()
	// Write-behind: write(2) succeeds, close(2) reports the failure.
	if werr != nil || !errors.Is(cerr, syscall.ESTALE) {
		t.Fatalf("write to a file removed on the server: write %v, close %v; want nil, ESTALE", werr, cerr)
	}
}

func testMisc(t *testing.T, dir string) {
	// mkfifo and a socket node.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("fifo: %v %v", st, err)
	}
	sock := filepath.Join(dir, "sock")
	if err := syscall.Mknod(sock, syscall.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket: %v %v", st, err)
	}
	os.Remove(fifo)
	os.Remove(sock)
	// statfs from FSSTAT.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dir, &sfs); err != nil || sfs.Blocks == 0 || sfs.Bsize != 4096 {
		t.Fatalf("statfs: %+v %v", sfs, err)
	}
	// access(2) goes to the server.
	if err := syscall.Access(dir, 7); err != nil {
		t.Fatalf("access: %v", err)
	}
	// xattrs: ENOTSUP; locks: ENOLCK (ENOSYS from us).
	p := filepath.Join(dir, "xa")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Getxattr(p, "user.x", make([]byte, 10)); !errors.Is(err, syscall.ENOTSUP) {
		t.Fatalf("getxattr: %v", err)
	}
	if err := syscall.Setxattr(p, "user.x", []byte("v"), 0); !errors.Is(err, syscall.ENOTSUP) {
		t.Fatalf("setxattr: %v", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err == nil {
		t.Fatal("fcntl lock succeeded")
	}
	f.Close()
	os.Remove(p)
}

// TestCloseToOpen writes through one mount and reads through a second
// one (both with a long attribute cache): after close, an open on the
// other mount sees the new data and size.
func TestCloseToOpen(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	a, _ := srv.mount(t, mountopts.ProtoTCP, "actimeo=60")
	b, _ := srv.mount(t, mountopts.ProtoTCP, "actimeo=60")
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")
	if err := os.WriteFile(pa, []byte("version one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(pb); err != nil || string(got) != "version one" {
		t.Fatalf("b: %q %v", got, err)
	}
	if st, err := os.Stat(pb); err != nil || st.Size() != 11 {
		t.Fatalf("b: stat %v %v", st, err)
	}
	if err := os.WriteFile(pa, []byte("version two, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	// b's attribute cache (60 s) may still say 11 bytes for stat(2), but
	// an open revalidates.
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != 19 {
		t.Fatalf("b: fstat after open: %v %v", st.Size(), err)
	}
	buf := make([]byte, 100)
	if n, err := f.Read(buf); err != nil || string(buf[:n]) != "version two, longer" {
		t.Fatalf("b after close on a: %q %v", buf[:n], err)
	}
}

// TestReadOnly checks that ro refuses changes with EROFS.
func TestReadOnly(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	if err := os.WriteFile(filepath.Join(srv.root, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _ := srv.mount(t, mountopts.ProtoTCP, "ro,noac")
	if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(got) != "data" {
		t.Fatalf("read: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create on ro: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on ro: %v", err)
	}
}

// TestMountWideCommit keeps five files open with 15 MiB written to each
// (under the per-file bound): past MountDirtyBytes, the mount commits them
// in the background, before any close.
func TestMountWideCommit(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	dir, m := srv.mount(t, mountopts.ProtoTCP, "")
	chunk := randBytes(1<<20, 5)
	var files []*os.File
	for i := range 5 {
		f, err := os.Create(filepath.Join(dir, "open"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		t.Cleanup(func() { f.Close() })
		for range 15 {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := m.sys.budget
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.mu.Lock()
		dirty, inflight := b.dirty, b.inflight
		b.mu.Unlock()
		if inflight == 0 && dirty <= MountDirtyBytes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dirty %d bytes, in flight %d, after 20 s", dirty, inflight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if st, err := os.Stat(filepath.Join(srv.root, "open"+strconv.Itoa(i))); err != nil || st.Size() != 15<<20 {
			t.Fatalf("on disk: %v %v", st, err)
		}
	}
}

// TestSoftMount stops the server under a soft mount: operations fail with
// EIO after timeo x retrans instead of hanging, and the mount still
// unmounts cleanly.
func TestSoftMount(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	dir, _ := srv.mount(t, mountopts.ProtoTCP, "soft,timeo=2,retrans=1,noac")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	start := time.Now()
	_, err := os.Stat(filepath.Join(dir, "g"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat with the server gone: %v, want EIO", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("soft failure took %v", d)
	}
}
