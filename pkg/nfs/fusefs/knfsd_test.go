package fusefs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestKnfsdMountOverRDMA mounts Linux knfsd's /export of the kernel peer
// (../shared/kernel-peer) with FUSE, NFS over RPC-over-RDMA through kernel
// siw (MOUNT over TCP), and runs the file operations through the kernel
// (syscalls on the mount point): it checks what the mount answers and, in
// the guest, what landed on knfsd's /export.
//
// MPA CRC is off, as in pkg/nfs/client's TestKnfsdOverRDMA, whose comment
// says why (kernel siw mis-checks a pad+CRC trailer that qemu's user-mode
// network split across two segments).
func TestKnfsdMountOverRDMA(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	needFUSE(t)
	k := mountKnfsd(t, env, mountopts.ProtoRDMA)
	before := k.rdma.Metrics()
	testKnfsdFiles(t, k, 32<<20, 300)
	st := k.rdma.Metrics()
	t.Logf("RPC-over-RDMA to knfsd: %+v", st)
	// The 32 MiB went out in Read chunks (knfsd pulled our WRITE data)
	// and came back in Write chunks (READ replies).
	if st.ReadChunkBytes-before.ReadChunkBytes < 32<<20 || st.WriteChunkBytes-before.WriteChunkBytes < 32<<20 {
		t.Errorf("the data did not move in Read and Write chunks: before %+v, after %+v", before, st)
	}
	if st.Calls != st.Replies {
		t.Errorf("calls without replies: %+v", st)
	}
}

// TestKnfsdMountOverTCP is the same as TestKnfsdMountOverRDMA, smaller,
// with NFS over TCP.
func TestKnfsdMountOverTCP(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFS_PORT")
	needFUSE(t)
	k := mountKnfsd(t, env, mountopts.ProtoTCP)
	testKnfsdFiles(t, k, 4<<20, 50)
}

// knfsdMount is a FUSE mount of knfsd's /export and a fresh work
// directory in it.
type knfsdMount struct {
	m         *Mount
	work      string // the work directory through the mount
	guestWork string // the same directory in the guest
	rdma      *rpcrdma.ClientMetrics
}

// mountKnfsd mounts the kernel peer's /export with client.Mount over
// proto, then with FUSE (Serve) on a temp dir, and makes a work directory
// /export/fusefs-PROTO-NANOS. The mount is soft (30 s timeo, 1 retrans):
// a stalled peer fails the test within a minute or two instead of hanging
// it with the mount. Cleanups unmount (bounded, checking that no mount is
// left), remove the work directory in the guest and then run the peer's
// check (after the unmount, so that it also sees the disconnect).
func mountKnfsd(t *testing.T, env map[string]string, proto string) *knfsdMount {
	t.Helper()
	t.Cleanup(func() { kernelpeer.Check(t) }) // last, after the unmount
	k := &knfsdMount{}
	if proto == mountopts.ProtoRDMA {
		k.rdma = new(rpcrdma.ClientMetrics)
	}
	name := fmt.Sprintf("fusefs-%s-%d", proto, time.Now().UnixNano())
	k.guestWork = "/export/" + name
	t.Cleanup(func() { kernelpeer.Sh(t, "rm -rf "+k.guestWork) })
	dir, m := fuseMountKnfsd(t, env, proto, "", k.rdma, "fusefs-knfsd-test", nil)
	t.Logf("mounted knfsd's /export over %s on %s: rsize %d wsize %d", proto, dir, m.Client.RSize(), m.Client.WSize())
	k.m = m
	k.work = filepath.Join(dir, name)
	if err := os.Mkdir(k.work, 0o755); err != nil {
		t.Fatal(err)
	}
	return k
}

// fuseMountKnfsd mounts the kernel peer's /export with client.Mount over
// proto (TCP, or software iWARP with the MPA CRC off: the guest's 6.1 siw
// honours a CRC we ask for, but its check of a trailer split across two
// TCP segments fails and drops the connection), soft (30 s timeo, 1
// retrans), with the nfs(5) options extra ("" or ",opt=...") and rdma
// (nil or) counting its RPC-over-RDMA calls; caller is its AUTH_SYS
// machine name and NLM caller name, and adjust (nil or) changes its
// client options. Then it serves it with FUSE on a temp dir until the
// test ends, and returns the mount point and the mount.
func fuseMountKnfsd(t *testing.T, env map[string]string, proto, extra string, rdma *rpcrdma.ClientMetrics, caller string, adjust func(*client.Options)) (string, *Mount) {
	t.Helper()
	opts := "proto=tcp,port=" + env["KP_NFS_PORT"]
	if proto == mountopts.ProtoRDMA {
		opts = "proto=rdma,rdmadev=siw,nompacrc,port=" + env["KP_NFSRDMA_PORT"]
	}
	mo, err := mountopts.Parse(opts + ",mountport=" + env["KP_MOUNT_PORT"] + ",soft,timeo=300,retrans=1" + extra)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.ForMount(env["KP_HOST"], mo, rdma)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Source: env["KP_HOST"] + ":/export", Options: mo, AuthSys: sunrpc.AuthSysParams{MachineName: caller}, LockCallerName: caller, Dial: tr.Dial, Transport: tr.Name}
	co, err := ClientOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(&co)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Mount(ctx, co)
	if err != nil {
		t.Fatalf("mount knfsd over %s: %v", proto, err)
	}
	dir := t.TempDir()
	m, err := Serve(ctx, c, dir, cfg)
	if err != nil {
		_ = c.Unmount(ctx)
		t.Fatal("FUSE mount:", err)
	}
	cleanupMount(t, dir, m)
	return dir, m
}

// guest runs cmd in the guest and returns its output without the
// surrounding white space.
func guest(t *testing.T, cmd string) string {
	t.Helper()
	return strings.TrimSpace(kernelpeer.Sh(t, cmd))
}

// guestWant fails the test unless cmd's output in the guest is want.
func guestWant(t *testing.T, what, cmd, want string) {
	t.Helper()
	if got := guest(t, cmd); got != want {
		t.Errorf("%s: in the guest %q says %q, want %q", what, cmd, got, want)
	}
}

// readUncached reads path through the mount after dropping the kernel's
// cached pages of the file, so that the data comes from the server.
func readUncached(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return nil, fmt.Errorf("fadvise: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Reads of an odd size, so that they straddle pages and FUSE READs.
	b := make([]byte, st.Size())
	for off := 0; off < len(b); {
		n, err := f.Read(b[off:min(off+3<<20+17, len(b))])
		off += n
		if err != nil {
			return b[:off], fmt.Errorf("read at %d of %d: %w", off, len(b), err)
		}
	}
	if n, err := f.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		return b, fmt.Errorf("read past the end: %d, %v", n, err)
	}
	return b, nil
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// firstDiff returns the offset of the first byte where a and b differ
// (or the shorter length).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// guestTime is t as busybox stat's %x/%y print it in the guest (UTC).
func guestTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000000 -0700") }

// testKnfsdFiles runs the file operations on k's work directory: a file
// of bigSize bytes written in 1 MiB writes and a directory of nEntries.
func testKnfsdFiles(t *testing.T, k *knfsdMount, bigSize, nEntries int) {
	w, g := k.work, k.guestWork
	p := func(name string) string { return filepath.Join(w, name) }
	gp := func(name string) string { return g + "/" + name }
	var phases []string
	last := time.Now()
	step := func(name string) {
		phases = append(phases, name+" "+time.Since(last).Round(time.Millisecond).String())
		last = time.Now()
	}
	defer func() { t.Logf("time taken: %s", strings.Join(phases, ", ")) }()
	var sfs0 syscall.Statfs_t
	if err := syscall.Statfs(w, &sfs0); err != nil {
		t.Fatal("statfs:", err)
	}

	// Exclusive create: once, then EEXIST; O_CREAT alone opens the
	// existing file without truncating it.
	f, err := os.OpenFile(p("excl"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal("O_EXCL create:", err)
	}
	if _, err := f.WriteString("x-data"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	if _, err := os.OpenFile(p("excl"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("second O_EXCL create: %v, want EEXIST", err)
	}
	if f, err := os.OpenFile(p("excl"), os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
		t.Fatal("O_CREAT of an existing file:", err)
	} else if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p("excl")); err != nil || st.Size() != 6 || st.Mode() != 0o640 {
		t.Fatalf("excl: stat %v, %v; want 6 bytes, -rw-r-----", st, err)
	}
	guestWant(t, "exclusively created file", "stat -c '%a %s' "+gp("excl")+" && cat "+gp("excl"), "640 6\nx-data")

	step("create")

	// The big file: 1 MiB writes, fsync, close, then read back from the
	// server and checked in the guest.
	big := randBytes(bigSize, uint64(time.Now().UnixNano()))
	t0 := time.Now()
	f, err = os.OpenFile(p("big"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(big); off += 1 << 20 {
		if n, err := f.Write(big[off:min(off+1<<20, len(big))]); err != nil || n != min(1<<20, len(big)-off) {
			t.Fatalf("write at %d: %d, %v", off, n, err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal("fsync:", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	wrote := time.Since(t0)
	if st, err := os.Stat(p("big")); err != nil || st.Size() != int64(len(big)) {
		t.Fatalf("big: stat %v, %v; want %d bytes", st, err, len(big))
	}
	t0 = time.Now()
	got, err := readUncached(p("big"))
	if err != nil {
		t.Fatal("big:", err)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("big: read back differs at %d (%d bytes read)", firstDiff(got, big), len(got))
	}
	t.Logf("big file of %d MiB: written and committed in %v, read back in %v", len(big)>>20, wrote, time.Since(t0))
	guestWant(t, "big file on knfsd's /export", "stat -c %s "+gp("big")+" && sha256sum "+gp("big"),
		strconv.Itoa(len(big))+"\n"+sha256hex(big)+"  "+gp("big"))
	guestAttrs(t, "big file after close", p("big"), gp("big"))
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(w, &sfs); err != nil {
		t.Fatal("statfs:", err)
	}
	if used := (int64(sfs0.Bfree) - int64(sfs.Bfree)) * sfs.Bsize; used < int64(len(big)) {
		t.Errorf("statfs: free space went down by %d bytes after writing %d", used, len(big))
	}

	step("big file")

	// Truncate: shrink by path, grow by descriptor, write past a hole;
	// the holes read as zeros, here and in the guest.
	data := randBytes(100000, 3)
	if err := os.WriteFile(p("trunc"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("trunc"), 5000); err != nil {
		t.Fatal("truncate:", err)
	}
	if st, err := os.Stat(p("trunc")); err != nil || st.Size() != 5000 {
		t.Fatalf("after truncate to 5000: %v, %v", st, err)
	}
	guestWant(t, "shrunk file", "stat -c %s "+gp("trunc"), "5000")
	f, err = os.OpenFile(p("trunc"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(300000); err != nil {
		t.Fatal("ftruncate:", err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 300000 {
		t.Fatalf("after ftruncate to 300000: %v, %v", st, err)
	}
	if _, err := f.WriteAt([]byte("tail"), 400000); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	want := make([]byte, 400004)
	copy(want, data[:5000])
	copy(want[400000:], "tail")
	if got, err := readUncached(p("trunc")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("truncated file: %d bytes (%v), differs from the expected at %d", len(got), err, firstDiff(got, want))
	}
	guestWant(t, "truncated file", "stat -c %s "+gp("trunc")+" && sha256sum "+gp("trunc"),
		"400004\n"+sha256hex(want)+"  "+gp("trunc"))

	step("truncate")

	// A write far past the end (8 GiB): a sparse file of that size.
	f, err = os.OpenFile(p("sparse"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const far = 8<<30 + 1
	if _, err := f.WriteAt([]byte("end"), far); err != nil {
		t.Fatal("write at 8 GiB:", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	f, err = os.Open(p("sparse"))
	if err != nil {
		t.Fatal(err)
	}
	tailBytes := make([]byte, 8)
	n, err := f.ReadAt(tailBytes, far-5)
	f.Close()
	if n != 8 || err != nil || string(tailBytes) != "\x00\x00\x00\x00\x00end" {
		t.Fatalf("read at 8 GiB: %d %q, %v", n, tailBytes[:n], err)
	}
	guestWant(t, "sparse file", "stat -c %s "+gp("sparse")+" && tail -c 4 "+gp("sparse")+" | od -An -c | tr -s ' '",
		strconv.Itoa(far+3)+"\n \\0 e n d")
	if err := os.Remove(p("sparse")); err != nil {
		t.Fatal(err)
	}

	step("sparse")

	// chmod, chown, utimes (atime and mtime apart, to the nanosecond).
	if err := os.Chmod(p("trunc"), 0o604); err != nil {
		t.Fatal("chmod:", err)
	}
	if err := os.Chown(p("trunc"), 1234, 5678); err != nil {
		t.Fatal("chown:", err)
	}
	atime := time.Date(2021, 3, 4, 5, 6, 7, 123, time.UTC)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := os.Chtimes(p("trunc"), atime, mtime); err != nil {
		t.Fatal("utimes:", err)
	}
	if st, err := os.Stat(p("trunc")); err != nil {
		t.Fatal(err)
	} else {
		s := st.Sys().(*syscall.Stat_t)
		if st.Mode() != 0o604 || s.Uid != 1234 || s.Gid != 5678 || !st.ModTime().Equal(mtime) ||
			!time.Unix(s.Atim.Unix()).Equal(atime) || st.Size() != 400004 {
			t.Errorf("after chmod/chown/utimes: mode %v uid %d gid %d mtime %v atime %v size %d",
				st.Mode(), s.Uid, s.Gid, st.ModTime(), time.Unix(s.Atim.Unix()), st.Size())
		}
	}
	guestWant(t, "chmod/chown/utimes", "stat -c '%a %u %g|%x|%y' "+gp("trunc"),
		"604 1234 5678|"+guestTime(atime)+"|"+guestTime(mtime))

	// utimes to the server's time (UTIME_NOW).
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p("trunc"), []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, 0); err != nil {
		t.Fatal("utimensat(UTIME_NOW):", err)
	}
	if st, err := os.Stat(p("trunc")); err != nil || !st.ModTime().After(mtime) {
		t.Fatalf("after utimensat(UTIME_NOW): %v, %v", st, err)
	}
	guestAttrs(t, "after utimensat(UTIME_NOW)", p("trunc"), gp("trunc"))

	// O_APPEND appends at the server's end of file; O_TRUNC truncates.
	f, err = os.OpenFile(p("excl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("+more"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	if err := os.WriteFile(p("trunc2"), []byte("a longer first content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("trunc2"), []byte("short"), 0o644); err != nil {
		t.Fatal("rewrite with O_TRUNC:", err)
	}
	guestWant(t, "O_APPEND and O_TRUNC", "cd "+g+" && cat excl && echo && cat trunc2", "x-data+more\nshort")
	guestAttrs(t, "after O_APPEND", p("excl"), gp("excl"))

	// Close-to-open: changes made on the server (in the guest) are seen
	// by the next open, even of the same size.
	for _, content := range []string{"changed in the guest", "CHANGED IN THE GUEST"} {
		kernelpeer.Sh(t, "printf '"+content+"' > "+gp("trunc2"))
		if got, err := os.ReadFile(p("trunc2")); err != nil || string(got) != content {
			t.Fatalf("open after a change on the server: %q, %v; want %q", got, err, content)
		}
	}
	if err := os.Remove(p("trunc2")); err != nil {
		t.Fatal(err)
	}

	step("setattr/append/close-to-open")

	// mkdir, mkdir again, rmdir of a non-empty directory, a cross-directory
	// rename out of it, rmdir.
	d := p("d")
	if err := os.Mkdir(d, 0o750); err != nil {
		t.Fatal("mkdir:", err)
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("mkdir: %v %v", st, err)
	}
	if err := os.Mkdir(d, 0o750); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mkdir twice: %v, want EEXIST", err)
	}
	if err := os.WriteFile(filepath.Join(d, "inner"), []byte("inner"), 0o644); err != nil {
		t.Fatal(err)
	}
	guestWant(t, "new directory", "stat -c '%a %F' "+gp("d")+" && cat "+gp("d/inner"), "750 directory\ninner")
	if err := syscall.Rmdir(d); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a non-empty directory: %v, want ENOTEMPTY", err)
	}
	if err := os.Rename(filepath.Join(d, "inner"), p("moved")); err != nil {
		t.Fatal("rename across directories:", err)
	}
	if err := syscall.Rmdir(d); err != nil {
		t.Fatal("rmdir:", err)
	}
	if _, err := os.Stat(d); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat after rmdir: %v, want ENOENT", err)
	}
	guestWant(t, "removed directory", "test ! -e "+gp("d")+" && cat "+gp("moved"), "inner")

	step("mkdir/rmdir")

	// Symlink and readlink.
	if err := os.Symlink("excl", p("sl")); err != nil {
		t.Fatal("symlink:", err)
	}
	if got, err := os.Readlink(p("sl")); err != nil || got != "excl" {
		t.Fatalf("readlink: %q, %v", got, err)
	}
	if st, err := os.Lstat(p("sl")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("lstat of the symlink: %v, %v", st, err)
	}
	if got, err := os.ReadFile(p("sl")); err != nil || string(got) != "x-data+more" {
		t.Fatalf("through the symlink: %q, %v", got, err)
	}
	guestWant(t, "symlink", "readlink "+gp("sl"), "excl")

	// Hard link: one inode (knfsd's inode number), link count 2.
	if err := os.Link(p("excl"), p("hl")); err != nil {
		t.Fatal("link:", err)
	}
	s1, err1 := os.Stat(p("excl"))
	s2, err2 := os.Stat(p("hl"))
	if err1 != nil || err2 != nil || !os.SameFile(s1, s2) || s1.Sys().(*syscall.Stat_t).Nlink != 2 || s2.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("hard link: %v %v, %v %v", s1, err1, s2, err2)
	}
	ino := strconv.FormatUint(s1.Sys().(*syscall.Stat_t).Ino, 10)
	guestWant(t, "hard link", "stat -c '%h %i' "+gp("excl")+" "+gp("hl"), "2 "+ino+"\n2 "+ino)

	// Rename to a new name, over an existing file, and of a directory.
	for name, content := range map[string]string{"a": "A", "src": "new", "target": "old"} {
		if err := os.WriteFile(p(name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(p("d2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("d2/f"), []byte("in d2"), 0o644); err != nil {
		t.Fatal(err)
	}
	srcSt, err := os.Stat(p("src"))
	if err != nil {
		t.Fatal(err)
	}
	srcIno := strconv.FormatUint(srcSt.Sys().(*syscall.Stat_t).Ino, 10)
	for _, r := range [][2]string{{"a", "b"}, {"src", "target"}, {"d2", "d3"}} {
		if err := os.Rename(p(r[0]), p(r[1])); err != nil {
			t.Fatalf("rename %s to %s: %v", r[0], r[1], err)
		}
		if _, err := os.Lstat(p(r[0])); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("%s after renaming it: %v, want ENOENT", r[0], err)
		}
	}
	for name, content := range map[string]string{"b": "A", "target": "new", "d3/f": "in d2"} {
		if got, err := os.ReadFile(p(name)); err != nil || string(got) != content {
			t.Fatalf("%s after the renames: %q, %v; want %q", name, got, err, content)
		}
	}
	// A directory renamed over a non-empty one: ENOTEMPTY (or EEXIST);
	// over an empty one: replaced. (rename(2) itself: os.Rename refuses
	// any directory target with EEXIST before calling it.)
	if err := os.MkdirAll(p("full/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rename(p("d3"), p("full")); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("rename of a directory over a non-empty one: %v, want ENOTEMPTY or EEXIST", err)
	}
	if err := syscall.Rename(p("d3"), p("full/sub")); err != nil {
		t.Fatal("rename of a directory over an empty one:", err)
	}
	if err := os.Rename(p("full/sub"), p("d3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("full")); err != nil {
		t.Fatal(err)
	}
	// Names: 255 bytes are fine, 256 are ENAMETOOLONG, from the client as
	// on Linux (knfsd answers such a name GARBAGE_ARGS, not
	// NFS3ERR_NAMETOOLONG).
	long := strings.Repeat("n", 255)
	if err := os.WriteFile(p(long), []byte("long"), 0o644); err != nil {
		t.Fatal("create with a 255-byte name:", err)
	}
	guestWant(t, "255-byte name", "cat "+gp(long), "long")
	if err := os.Remove(p(long)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p(long+"n"), nil, 0o644); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("create with a 256-byte name: %v, want ENAMETOOLONG", err)
	}
	if err := os.Mkdir(p(long+"n"), 0o755); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("mkdir with a 256-byte name: %v, want ENAMETOOLONG", err)
	}
	guestWant(t, "renames", "cd "+g+" && cat b target d3/f && echo && stat -c %i target && ls",
		"Anewin d2\n"+srcIno+"\n"+strings.Join([]string{"b", "big", "d3", "excl", "hl", "moved", "sl", "target", "trunc"}, "\n"))

	step("links/renames/names")

	// A directory of nEntries, listed with getdents64 buffers of several
	// sizes: each name exactly once (bigdir_test.go's helpers).
	many := p("many")
	names := makeEntries(t, many, nEntries)
	for _, bufSize := range []int{256, 8 << 10, 64 << 10} {
		got, err := getdents(many, bufSize)
		if err != nil {
			t.Fatalf("listing with a %d-byte buffer: %v", bufSize, err)
		}
		if msg := compareNames(got, names); msg != "" {
			t.Fatalf("listing through the mount with a %d-byte buffer: %s", bufSize, msg)
		}
	}
	ents, err := os.ReadDir(many)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			t.Fatalf("%s: type %v", e.Name(), e.Type())
		}
	}
	if msg := compareNames(strings.Fields(guest(t, "ls -1 "+gp("many"))), names); msg != "" {
		t.Fatalf("listing in the guest: %s", msg)
	}

	step("readdir")

	// mknod: a FIFO, a socket and a character device.
	if err := syscall.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatal("mkfifo:", err)
	}
	if st, err := os.Lstat(p("fifo")); err != nil || st.Mode() != os.ModeNamedPipe|0o600 {
		t.Fatalf("fifo: %v, %v", st, err)
	}
	if err := syscall.Mknod(p("sock"), syscall.S_IFSOCK|0o640, 0); err != nil {
		t.Fatal("mknod socket:", err)
	}
	if st, err := os.Lstat(p("sock")); err != nil || st.Mode() != os.ModeSocket|0o640 {
		t.Fatalf("socket: %v, %v", st, err)
	}
	if err := syscall.Mknod(p("null"), syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal("mknod character device:", err)
	}
	if st, err := os.Lstat(p("null")); err != nil || st.Mode() != os.ModeDevice|os.ModeCharDevice|0o600 ||
		st.Sys().(*syscall.Stat_t).Rdev != unix.Mkdev(1, 3) {
		t.Fatalf("character device: %v, %v", st, err)
	}
	guestWant(t, "special files", "cd "+g+" && stat -c '%a %F' fifo sock && stat -c '%a %F %t %T' null",
		"600 fifo\n640 socket\n600 character special file 1 3")

	// Unlink: the hard link (excl back to one link), the specials, a
	// missing name; removal of the whole tree.
	for _, name := range []string{"hl", "fifo", "sock", "null", "sl"} {
		if err := os.Remove(p(name)); err != nil {
			t.Fatal("unlink:", err)
		}
	}
	if err := os.Remove(p("nope")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlink of a missing name: %v, want ENOENT", err)
	}
	if st, err := os.Stat(p("excl")); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 1 {
		t.Fatalf("excl after unlinking its hard link: %v, %v", st, err)
	}
	guestWant(t, "unlink", "cd "+g+" && stat -c %h excl && ls | grep -v many",
		"1\n"+strings.Join([]string{"b", "big", "d3", "excl", "moved", "target", "trunc"}, "\n"))

	step("mknod/unlink")

	// Unlink of an open file (silly rename): knfsd frees a file at its
	// last REMOVE, so without the rename a READ through the descriptor
	// would get NFS3ERR_STALE.
	open1 := bytes.Repeat([]byte("still open "), 50000)
	if err := os.WriteFile(p("open1"), open1, 0o600); err != nil {
		t.Fatal(err)
	}
	of, err := os.Open(p("open1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("open1")); err != nil {
		t.Fatal("unlink of an open file:", err)
	}
	guestWant(t, "silly-renamed file", "ls -a "+g+" | grep -c '^\\.nfs' || true", "1")
	if err := unix.Fadvise(int(of.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(of); err != nil || !bytes.Equal(got, open1) {
		t.Fatalf("read of an unlinked open file: %d bytes, %v", len(got), err)
	}
	of.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if guest(t, "ls -a "+g+" | grep -c '^\\.nfs' || true") == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("silly-renamed file left in the guest after the last close")
		}
	}

	step("silly rename")

	// statfs: knfsd's FSSTAT of the tmpfs, as the guest sees it.
	if err := syscall.Statfs(w, &sfs); err != nil {
		t.Fatal("statfs:", err)
	}
	gs := strings.Fields(guest(t, "stat -f -c '%b %S %f %c' "+g))
	if len(gs) != 4 {
		t.Fatalf("guest statfs: %q", gs)
	}
	gBlocks, _ := strconv.ParseUint(gs[0], 10, 64)
	gBsize, _ := strconv.ParseUint(gs[1], 10, 64)
	gFree, _ := strconv.ParseUint(gs[2], 10, 64)
	gFiles, _ := strconv.ParseUint(gs[3], 10, 64)
	if sfs.Bsize != 4096 || sfs.Blocks*uint64(sfs.Bsize) != gBlocks*gBsize || sfs.Files != gFiles ||
		sfs.Bfree > sfs.Blocks || absDiff(sfs.Bfree*uint64(sfs.Bsize), gFree*gBsize) > 1<<20 {
		t.Errorf("statfs: bsize %d blocks %d free %d files %d; in the guest %v (blocks, bsize, free, files)",
			sfs.Bsize, sfs.Blocks, sfs.Bfree, sfs.Files, gs)
	}

	if err := os.RemoveAll(w); err != nil {
		t.Fatal("remove the work directory:", err)
	}
	if _, err := os.Stat(w); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("work directory after removal: %v", err)
	}
	guestWant(t, "removed work directory", "test -e "+g+" && echo present || echo gone", "gone")

	step("statfs/removal")

	b := k.m.sys.budget
	b.mu.Lock()
	if b.inflight != 0 || b.dirty != 0 || len(b.dirtyFiles) != 0 {
		t.Errorf("write budget not back to zero after every file was closed: %d in flight, %d dirty, %d dirty files",
			b.inflight, b.dirty, len(b.dirtyFiles))
	}
	b.mu.Unlock()
	if rs := k.m.Client.Stats(); rs.Retransmits != 0 || rs.Reconnects != 0 {
		t.Errorf("calls were retransmitted or the connection was remade: %+v", rs)
	}
}

// guestAttrs fails the test unless stat of path through the mount and of
// guestPath in the guest agree: size, times to the nanosecond, inode,
// links, mode and owner.
func guestAttrs(t *testing.T, what, path, guestPath string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	ts := func(s syscall.Timespec) string { return guestTime(time.Unix(s.Unix())) }
	want := fmt.Sprintf("%d|%s|%s|%s|%d %d %o %d %d", st.Size, ts(st.Atim), ts(st.Mtim), ts(st.Ctim),
		st.Ino, st.Nlink, st.Mode&0o7777, st.Uid, st.Gid)
	guestWant(t, what+": stat through the mount vs in the guest", "stat -c '%s|%x|%y|%z|%i %h %a %u %g' "+guestPath, want)
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
