package volumes

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// makeTree fills dir with a 64 MiB file, a sparse file, nested
// directories, symlinks, hard links, a FIFO and objects with their own
// owners, modes and times.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	big := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{42}).Read(big)
	testenv.MustWrite(t, filepath.Join(dir, "big"), big)
	testenv.MustWrite(t, filepath.Join(dir, "a", "b", "c", "deep.txt"), []byte("deep down"))
	testenv.MustWrite(t, filepath.Join(dir, "hard1"), []byte("linked"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Link(filepath.Join(dir, "hard1"), filepath.Join(dir, "a", "hard2")))
	must(os.Symlink("../big", filepath.Join(dir, "a", "link")))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "abs-link")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640))
	must(os.Mkdir(filepath.Join(dir, "empty"), 0o711))
	sp, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	_, err = sp.WriteAt(big[:1<<20], 0)
	must(err)
	_, err = sp.WriteAt([]byte("tail"), 20<<20)
	must(err)
	must(sp.Close())
	must(os.Chown(filepath.Join(dir, "a", "b"), 1000, 1000))
	must(os.Chmod(filepath.Join(dir, "a", "b"), 0o750))
	must(os.Lchown(filepath.Join(dir, "a", "link"), 1234, 5678))
	must(os.Chown(filepath.Join(dir, "hard1"), 1234, 5678))
	must(os.Chmod(filepath.Join(dir, "hard1"), 0o4755))
	old := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "a", "b", "c", "deep.txt"), old, old))
	must(os.Chtimes(filepath.Join(dir, "a", "b", "c"), old, old))
}

type entry struct {
	mode     fs.FileMode
	uid, gid uint32
	mtime    int64
	size     int64
	sum      [32]byte
	target   string
	ino      uint64
}

// readTree describes every entry beneath dir (not dir itself).
func readTree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano(), ino: st.Ino}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.size, e.sum = fi.Size(), sha256.Sum256(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			e.target, _ = os.Readlink(p)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree checks that copy holds what orig holds: types, modes, owners,
// mtimes, contents, symlink targets and hard links.
func sameTree(t *testing.T, orig, copy string) {
	t.Helper()
	a, b := readTree(t, orig), readTree(t, copy)
	if len(a) != len(b) {
		t.Fatalf("%s has %d entries, %s %d", orig, len(a), copy, len(b))
	}
	for rel, x := range a {
		y, ok := b[rel]
		if !ok {
			t.Fatalf("%s: missing in the copy", rel)
		}
		if x.mode != y.mode || x.uid != y.uid || x.gid != y.gid || x.size != y.size || x.sum != y.sum || x.target != y.target {
			t.Fatalf("%s: copy %+v, original %+v", rel, y, x)
		}
		if x.mode&fs.ModeSymlink == 0 && x.mtime != y.mtime {
			t.Fatalf("%s: mtime %d, original %d", rel, y.mtime, x.mtime)
		}
	}
	if b["hard1"].ino != b["a/hard2"].ino {
		t.Fatal("hard link not preserved")
	}
	var sa, sb unix.Stat_t
	unix.Stat(filepath.Join(orig, "sparse"), &sa)
	unix.Stat(filepath.Join(copy, "sparse"), &sb)
	if sb.Blocks > sa.Blocks+16 {
		t.Fatalf("sparse file: %d blocks in the copy, %d in the original", sb.Blocks, sa.Blocks)
	}
}

// TestSnapshotClone snapshots a volume holding a 64 MiB file, nested
// directories, symlinks and hard links, watches the copy's progress,
// checks the copy byte for byte, clones the snapshot and the volume into
// new volumes, and checks that snapshots survive a restart (an
// interrupted copy starts again), are out of NFS's reach, and go away on
// delete.
func TestSnapshotClone(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	src := filepath.Join(root, "src")
	makeTree(t, src)
	for _, d := range []string{"clone1", "clone2", "clone3"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := startRegEnv(t, root, state)
	ctx := ctxLong(t)
	a := e.adm
	if _, err := a.PutVolume(ctx, "src", 0); err != nil {
		t.Fatal(err)
	}
	e.reg.jobs.pace = func() { time.Sleep(20 * time.Millisecond) }

	// watch copies make progress
	watch := func(get func() (size, copied int64, ready bool, msg string)) {
		t.Helper()
		sawProgress := false
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			size, copied, ready, msg := get()
			if msg != "" {
				t.Fatal("copy failed:", msg)
			}
			if ready {
				if !sawProgress {
					t.Fatal("no progress seen while copying")
				}
				if copied < 64<<20 || copied != size {
					t.Fatalf("done: copied %d of %d", copied, size)
				}
				return
			}
			if copied > 0 && copied < size && size >= 64<<20 {
				sawProgress = true
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("copy did not end")
	}
	if _, err := a.CreateSnapshot(ctx, "snap-1", "src"); err != nil {
		t.Fatal(err)
	}
	watch(func() (int64, int64, bool, string) {
		s, err := a.GetSnapshot(ctx, "snap-1")
		if err != nil {
			t.Fatal(err)
		}
		return s.SizeBytes, s.CopiedBytes, s.Ready, s.Error
	})
	snapDir := filepath.Join(state, "snapshots", "snap-1")
	sameTree(t, src, snapDir)

	// out of every NFS client's reach: not beneath the root, which New enforces
	if rel, _ := filepath.Rel(root, snapDir); !strings.HasPrefix(rel, "..") {
		t.Fatalf("snapshot %s beneath the root %s", snapDir, root)
	}
	if _, err := New(Options{Root: root, StateDir: filepath.Join(root, "state")}); err == nil {
		t.Fatal("a snapshot directory beneath the root was accepted")
	}

	// clone the snapshot, then the volume
	if _, err := a.CreateClone(ctx, admin.Clone{Dest: "clone1", FromSnapshot: "snap-1"}); err != nil {
		t.Fatal(err)
	}
	// in use: cannot be deleted while a clone is filled from it
	if err := a.DeleteSnapshot(ctx, "snap-1"); !errors.Is(err, admin.ErrPrecondition) {
		t.Fatalf("DeleteSnapshot while cloning: %v", err)
	}
	watch(func() (int64, int64, bool, string) {
		c, err := a.GetClone(ctx, "clone1")
		if err != nil {
			t.Fatal(err)
		}
		return c.SizeBytes, c.CopiedBytes, c.Ready, c.Error
	})
	sameTree(t, src, filepath.Join(root, "clone1"))
	e.reg.jobs.pace = nil
	if _, err := a.CreateClone(ctx, admin.Clone{Dest: "clone2", FromVolume: "src"}); err != nil {
		t.Fatal(err)
	}
	if c := waitClone(t, a, "clone2"); c.Error != "" || c.CopiedBytes < 64<<20 {
		t.Fatalf("clone from volume: %+v", c)
	}
	sameTree(t, src, filepath.Join(root, "clone2"))
	if _, err := a.PutVolume(ctx, "clone2", 1<<30); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "clone2")
	// a clone into a registered volume: its usage is counted at the end
	if _, err := a.PutVolume(ctx, "clone3", 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateClone(ctx, admin.Clone{Dest: "clone3", FromSnapshot: "snap-1"}); err != nil {
		t.Fatal(err)
	}
	if c := waitClone(t, a, "clone3"); c.Error != "" {
		t.Fatal(c.Error)
	}
	if v := checkUsage(t, e, "clone3"); v.UsedBytes < 64<<20 {
		t.Fatalf("clone3 usage %+v", v)
	}

	// an interrupted copy starts again after a restart
	e.reg.jobs.pace = func() { time.Sleep(300 * time.Millisecond) }
	if _, err := a.CreateSnapshot(ctx, "snap-2", "src"); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := a.GetSnapshot(ctx, "snap-2")
		if err != nil {
			t.Fatal(err)
		}
		if s.CopiedBytes > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.stop()
	e2 := startRegEnv(t, root, state)
	a = e2.adm
	if s := waitSnapshot(t, a, "snap-2"); !s.Ready || s.Error != "" {
		t.Fatalf("snap-2 after restart: %+v", s)
	}
	sameTree(t, src, filepath.Join(state, "snapshots", "snap-2"))
	s1, err := a.GetSnapshot(ctx, "snap-1")
	if err != nil || !s1.Ready || s1.Source != "src" {
		t.Fatalf("snap-1 after restart: %+v, %v", s1, err)
	}
	if c, err := a.GetClone(ctx, "clone1"); err != nil || !c.Ready {
		t.Fatalf("clone1 after restart: %+v, %v", c, err)
	}
	list, err := a.ListSnapshots(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListSnapshots: %+v, %v", list, err)
	}

	// delete removes the tree, for good
	if err := a.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snapDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot tree after delete: %v", err)
	}
	if _, err := a.GetSnapshot(ctx, "snap-1"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("GetSnapshot after delete: %v", err)
	}
	// a deleted snapshot's id may be used again
	e2.stop()
	e3 := startRegEnv(t, root, state)
	if list, err := e3.adm.ListSnapshots(ctx); err != nil || len(list) != 1 || list[0].ID != "snap-2" {
		t.Fatalf("ListSnapshots after restart: %+v, %v", list, err)
	}
	if err := e3.adm.DeleteSnapshot(ctx, "snap-2"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(state, "snapshots"))
	if len(entries) != 0 {
		t.Fatalf("snapshot directory not empty: %v", entries)
	}
	if !bytes.Contains(mustRead(t, filepath.Join(state, StateFileName)), []byte(`"snapshots": []`)) {
		t.Fatal("the state file still lists snapshots")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
