package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"golang.org/x/sys/unix"
)

// bigDirEntries is the size of the directory of TestBigDirectory.
const bigDirEntries = 10000

// TestBigDirectory runs a directory of 10,000 entries through the mount
// over RPC-over-RDMA: create all, list (the exact set of names, each once,
// by getdents64 with a small, an 8 KiB and a large buffer), stat each,
// rename each, list, remove all, list empty; at each stage the export's
// directory on the server's disk holds the same names.
func TestBigDirectory(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	dir, m := srv.mount(t, mountopts.ProtoRDMA, "")
	start := time.Now()
	stage := func(what string) {
		t.Logf("%s: %v, NFS client %+v", what, time.Since(start).Round(time.Millisecond), m.Client.Stats())
	}
	d := filepath.Join(dir, "big")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(srv.root, "big")

	names := make([]string, bigDirEntries)
	for i := range names {
		names[i] = fmt.Sprintf("f%05d-%s", i, strconv.FormatUint(uint64(i)*2654435761%1000003, 36))
	}
	parallel(t, len(names), func(i int) error {
		fd, err := unix.Open(filepath.Join(d, names[i]), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create %s: %w", names[i], err)
		}
		if _, err := unix.Write(fd, []byte(names[i])); err != nil {
			unix.Close(fd)
			return fmt.Errorf("write %s: %w", names[i], err)
		}
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("close %s: %w", names[i], err)
		}
		return nil
	})
	stage("created")
	checkListing(t, "after create", d, disk, names)
	stage("listed")

	parallel(t, len(names), func(i int) error {
		st, err := os.Lstat(filepath.Join(d, names[i]))
		switch {
		case err != nil:
			return err
		case !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 || st.Size() != int64(len(names[i])):
			return fmt.Errorf("stat %s: mode %v size %d, want a 0644 file of %d bytes", names[i], st.Mode(), st.Size(), len(names[i]))
		}
		return nil
	})

	renamed := make([]string, len(names))
	for i, n := range names {
		renamed[i] = "renamed-" + n
	}
	parallel(t, len(names), func(i int) error {
		return os.Rename(filepath.Join(d, names[i]), filepath.Join(d, renamed[i]))
	})
	stage("stat and renamed")
	checkListing(t, "after rename", d, disk, renamed)
	stage("listed")
	// The renamed files keep their data.
	for _, i := range []int{0, 1, bigDirEntries / 2, bigDirEntries - 1} {
		if b, err := os.ReadFile(filepath.Join(d, renamed[i])); err != nil || string(b) != names[i] {
			t.Fatalf("%s after rename: %q, %v; want %q", renamed[i], b, err, names[i])
		}
	}
	for _, n := range []string{names[0], names[bigDirEntries-1]} {
		if _, err := os.Lstat(filepath.Join(d, n)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("old name %s after rename: %v, want ENOENT", n, err)
		}
	}

	parallel(t, len(names), func(i int) error {
		if err := os.Remove(filepath.Join(d, renamed[i])); err != nil {
			_, derr := os.Lstat(filepath.Join(disk, renamed[i]))
			return fmt.Errorf("%w (on the server's disk: %v)", err, derr)
		}
		return nil
	})
	stage("removed")
	checkListing(t, "after remove", d, disk, nil)
	if err := os.Remove(d); err != nil {
		t.Fatal("rmdir of the emptied directory:", err)
	}
	if _, err := os.Lstat(disk); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory on the server after rmdir: %v", err)
	}
}

// parallel runs f(0..n-1) on 4 goroutines and fails the test with the
// first error (the rest still run).
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// checkListing lists d through the mount with getdents64 buffers of
// 256 bytes (the kernel keeps a few entries of each FUSE READDIRPLUS
// reply and asks again from the last one it kept), 8 KiB (os.ReadDir's)
// and 64 KiB, and the server's directory disk, and fails unless each
// listing is exactly want (each name once, "." and ".." aside).
func checkListing(t *testing.T, stage, d, disk string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	for _, bufSize := range []int{256, 8 << 10, 64 << 10} {
		got, err := getdents(d, bufSize)
		if err != nil {
			t.Fatalf("%s: listing with a %d-byte buffer: %v", stage, bufSize, err)
		}
		if msg := compareNames(got, want); msg != "" {
			t.Fatalf("%s: listing through the mount with a %d-byte buffer: %s", stage, bufSize, msg)
		}
	}
	ents, err := os.ReadDir(disk)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if msg := compareNames(got, want); msg != "" {
		t.Fatalf("%s: server's directory: %s", stage, msg)
	}
}

// makeEntries makes directory d with n empty files (exclusive creates)
// named entry-with-a-longish-name-I and returns their names, sorted.
func makeEntries(t *testing.T, d string, n int) []string {
	t.Helper()
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "entry-with-a-longish-name-" + strconv.Itoa(i)
		f, err := os.OpenFile(filepath.Join(d, names[i]), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return names
}

// getdents lists directory path with getdents64 calls of bufSize bytes,
// returning the names other than "." and ".." in the order read.
func getdents(path string, bufSize int) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, bufSize)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return names, fmt.Errorf("getdents64 after %d names: %w", len(names), err)
		}
		if n == 0 {
			return names, nil
		}
		for p := 0; p < n; {
			reclen := int(binary.NativeEndian.Uint16(buf[p+16:]))
			if reclen < 20 || p+reclen > n {
				return names, fmt.Errorf("getdents64: bad record length %d at %d of %d", reclen, p, n)
			}
			nb := buf[p+19 : p+reclen]
			if i := slices.Index(nb, 0); i >= 0 {
				nb = nb[:i]
			}
			if name := string(nb); name != "." && name != ".." {
				names = append(names, name)
			}
			p += reclen
		}
	}
}

// compareNames returns "" if got (any order) is exactly the sorted want,
// else what differs: duplicates, missing and unexpected names (the first
// few of each).
func compareNames(got, want []string) string {
	seen := make(map[string]int, len(got))
	var dups []string
	for _, n := range got {
		seen[n]++
		if seen[n] == 2 {
			dups = append(dups, n)
		}
	}
	var missing []string
	for _, n := range want {
		if seen[n] == 0 {
			missing = append(missing, n)
		}
		delete(seen, n)
	}
	extra := slices.Sorted(func(yield func(string) bool) {
		for n := range seen {
			if !yield(n) {
				return
			}
		}
	})
	if len(dups) == 0 && len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("%d names, want %d: %d duplicated %v, %d missing %v, %d unexpected %v",
		len(got), len(want), len(dups), head(dups), len(missing), head(missing), len(extra), head(extra))
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// onSignalledThread runs f on a goroutine locked to its OS thread while
// another goroutine sends that thread SIGURG (which the Go runtime
// handles and ignores) every few tens of microseconds, so that the
// kernel interrupts f's FUSE requests (FUSE_INTERRUPT) again and again.
func onSignalledThread(t *testing.T, f func() error) {
	t.Helper()
	tid := make(chan int, 1)
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		errc <- f()
		close(stop)
	}()
	id, pid := <-tid, unix.Getpid()
	var sent int
	for {
		select {
		case err := <-errc:
			t.Logf("%d signals sent", sent)
			if err != nil {
				t.Fatal(err)
			}
			if sent == 0 {
				t.Fatal("no signal reached the calling thread: nothing was interrupted")
			}
			return
		default:
		}
		if err := unix.Tgkill(pid, id, unix.SIGURG); err == nil {
			sent++
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// TestSignalledCallers runs file and directory operations
// through the mount, over RPC-over-RDMA, from a thread that keeps getting
// signals: the kernel interrupts the FUSE requests (FUSE_INTERRUPT), and
// the mount must still finish each one and report its true outcome, as
// Linux's NFS client does for a signal that does not kill the caller.
// It fails if an interrupt cancels the NFS call: close(2) then fails with
// EINTR after the COMMIT is abandoned, open(O_CREAT|O_EXCL) retried after
// EINTR finds the file it created (EEXIST), unlink retried finds nothing
// (ENOENT), and listings lose entries: an interrupted READDIRPLUS fill
// returns EINTR in the middle of a FUSE READDIRPLUS, which go-fuse (v2.8
// to v2.12) keeps (fileEntry.overflowErrno) and returns in place of each
// later entry that does not fit a reply, dropping that entry, while
// getdents64 is retried after EINTR (by Go and by many programs) without
// an error ever showing.
func TestSignalledCallers(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	dir, _ := srv.mount(t, mountopts.ProtoRDMA, "")

	t.Run("files", func(t *testing.T) {
		d := filepath.Join(dir, "files")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		onSignalledThread(t, func() error {
			for i := range 300 {
				p := filepath.Join(d, "f"+strconv.Itoa(i))
				fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
				if err != nil {
					return fmt.Errorf("create %s: %w", p, err)
				}
				_, werr := unix.Write(fd, make([]byte, 64<<10))
				serr := unix.Fsync(fd)
				if cerr := unix.Close(fd); werr != nil || serr != nil || cerr != nil {
					return fmt.Errorf("%s: write %v, fsync %v, close %v", p, werr, serr, cerr)
				}
				if err := unix.Rename(p, p+".r"); err != nil {
					return fmt.Errorf("rename %s: %w", p, err)
				}
				if err := unix.Unlink(p + ".r"); err != nil {
					return fmt.Errorf("unlink %s.r: %w", p, err)
				}
			}
			return nil
		})
	})

	t.Run("readdir", func(t *testing.T) {
		d := filepath.Join(dir, "dir")
		want := makeEntries(t, d, 3000)
		onSignalledThread(t, func() error {
			for pass := range 4 {
				// A new directory handle each pass: go-fuse's state
				// is per handle.
				got, err := getdents(d, 8<<10)
				if err != nil {
					return fmt.Errorf("pass %d: %w", pass, err)
				}
				if msg := compareNames(got, want); msg != "" {
					return fmt.Errorf("pass %d: %s", pass, msg)
				}
			}
			return nil
		})
	})
}

// TestListWhileCreating lists a directory over and over
// through the mount, over RPC-over-RDMA, while another goroutine creates
// entries in it. Each listing must succeed and list each name once: every
// name created before the listing began, and no name never created. It
// fails with EINVAL if a READDIRPLUS after the first meets
// NFS3ERR_BAD_COOKIE: our server's cookie verifier is the directory's
// mtime, which each CREATE changes.
func TestListWhileCreating(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	dir, _ := srv.mount(t, mountopts.ProtoRDMA, "")
	d := filepath.Join(dir, "busy")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	name := func(i int) string { return "entry-with-a-longish-name-" + strconv.Itoa(i) }
	var created atomic.Int64 // names 0..created-1 exist
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			if err := unix.Mknod(filepath.Join(d, name(i)), unix.S_IFREG|0o644, 0); err != nil {
				errc <- err
				return
			}
			created.Store(int64(i + 1))
		}
		errc <- nil
	}()
	listings := 0
	for done := false; !done; {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal("create:", err)
			}
			done = true
		default:
		}
		before := int(created.Load())
		got, err := getdents(d, 8<<10)
		if err != nil {
			t.Fatalf("listing %d, while creating (%d created): %v", listings, before, err)
		}
		after := int(created.Load())
		seen := make(map[string]bool, len(got))
		for _, g := range got {
			i, err := strconv.Atoi(strings.TrimPrefix(g, name(0)[:len(name(0))-1]))
			if seen[g] || err != nil || i >= after+1 {
				t.Fatalf("listing %d: %q listed twice or never created (%d created)", listings, g, after)
			}
			seen[g] = true
		}
		for i := range before {
			if !seen[name(i)] {
				t.Fatalf("listing %d: %s, created before the listing began, is missing (%d of %d listed)", listings, name(i), len(got), before)
			}
		}
		listings++
	}
	t.Logf("%d listings while creating %d entries", listings, n)
}
