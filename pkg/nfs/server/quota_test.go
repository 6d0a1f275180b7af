package server

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// checkUsage compares the usage the server keeps for volume p with a
// fresh walk of its tree; calls the client gave up on may still be running
// on the server for a moment, so it tries for up to 2 s.
func checkUsage(t *testing.T, e *volEnv, p string) admin.Volume {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		v, err := e.adm.GetVolume(testenv.Context(t, 30*time.Second), p)
		if err != nil {
			t.Fatal(err)
		}
		u, err := walkUsage(filepath.Join(e.root, p))
		if err != nil {
			t.Fatal(err)
		}
		if v.UsedBytes == u.bytes && v.UsedInodes == u.inodes {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s: usage kept %d bytes, %d inodes; the tree holds %d bytes, %d inodes", p, v.UsedBytes, v.UsedInodes, u.bytes, u.inodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// treeUse is what a tree allocates: bytes (st_blocks*512) and inodes,
// hard links once.
type treeUse struct{ bytes, inodes int64 }

// walkUsage walks dir (itself included, never following a symlink) with
// lstat(2), as du(1) counts: the oracle the registry's accounting is
// checked against.
func walkUsage(dir string) (treeUse, error) {
	var u treeUse
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if k := [2]uint64{st.Dev, st.Ino}; !seen[k] {
			seen[k] = true
			u.bytes += st.Blocks * 512
			u.inodes++
		}
		return nil
	})
	return u, err
}

func checkFsstat(t *testing.T, c *client.Client, quota, used int64) {
	t.Helper()
	fs, err := c.Fsstat(testenv.Context(t, 30*time.Second), c.Root())
	if err != nil {
		t.Fatal(err)
	}
	free := uint64(max(0, quota-used))
	if fs.TBytes != uint64(quota) || fs.FBytes != free || fs.ABytes != free || fs.TFiles == 0 {
		t.Fatalf("FSSTAT: tbytes %d fbytes %d abytes %d tfiles %d; want %d, %d", fs.TBytes, fs.FBytes, fs.ABytes, fs.TFiles, quota, free)
	}
}

// TestVolumeQuota writes through our NFS client, over TCP and over
// RPC-over-RDMA, into a volume with a quota: the write that passes the
// quota fails with NFS3ERR_NOSPC, nothing written before is lost, FSSTAT
// reports the quota, raising the quota lets the writes continue, and a
// restarted server keeps quota, list and usage.
func TestVolumeQuota(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) { volumeQuota(t, proto) })
	}
}

func volumeQuota(t *testing.T, proto string) {
	root, state := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	const quota = 8 * mib
	e := startVolume(t, root, state, proto == "rdma", quota, "node-a")
	ctx := ctxLong(t)
	c, err := e.mount(ctx, "/vol", proto)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v := checkUsage(t, e, "vol")
	checkFsstat(t, c, quota, v.UsedBytes)

	data := randomBytes(16*mib, 7)
	fh, _, err := c.CreateFile(ctx, c.Root(), "data", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	f := c.OpenFile(fh)
	written := 0
	var werr error
	for written < len(data) {
		n, err := f.WriteAt(ctx, data[written:written+mib], int64(written))
		written += n
		if err != nil {
			werr = err
			break
		}
	}
	if !errors.Is(werr, nfs3.ErrNoSpc) {
		t.Fatalf("writing past the quota: %v after %d bytes, want NFS3ERR_NOSPC", werr, written)
	}
	if written < 6*mib || written > quota {
		t.Fatalf("%d bytes written before NFS3ERR_NOSPC with a quota of %d", written, quota)
	}
	t.Logf("NFS3ERR_NOSPC after %d bytes (quota %d)", written, quota)
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	readBack := func(n int) {
		t.Helper()
		got := make([]byte, n+mib)
		m, err := c.ReadAt(ctx, fh, got, 0)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if m != n || !bytes.Equal(got[:m], data[:n]) {
			t.Fatalf("read back %d bytes (want %d), equal %v", m, n, bytes.Equal(got[:min(m, n)], data[:min(m, n)]))
		}
	}
	readBack(written)
	v = checkUsage(t, e, "vol")
	if v.UsedBytes > quota {
		t.Fatalf("usage %d past the quota %d", v.UsedBytes, quota)
	}
	checkFsstat(t, c, quota, v.UsedBytes)

	// growing the size past the quota fails too, and changes nothing
	if _, err := c.Truncate(ctx, fh, 1<<30); !errors.Is(err, nfs3.ErrNoSpc) {
		t.Fatalf("SETATTR size past the quota: %v", err)
	}
	readBack(written)

	// ControllerExpandVolume: the write continues
	if v, err = e.adm.PutVolume(ctx, "vol", 2*quota); err != nil || v.QuotaBytes != 2*quota {
		t.Fatalf("raising the quota: %+v, %v", v, err)
	}
	if n, err := f.WriteAt(ctx, data[written:14*mib], int64(written)); err != nil {
		t.Fatalf("writing after the quota was raised: %d, %v", n, err)
	}
	written = 14 * mib
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	readBack(written)
	v = checkUsage(t, e, "vol")
	checkFsstat(t, c, 2*quota, v.UsedBytes)

	// lowering the quota below the usage: allowed, further growth fails,
	// overwriting in place and shrinking still work
	if _, err := e.adm.PutVolume(ctx, "vol", quota); err != nil {
		t.Fatal(err)
	}
	checkFsstat(t, c, quota, v.UsedBytes)
	if _, err := f.WriteAt(ctx, data[written:written+mib], int64(written)); !errors.Is(err, nfs3.ErrNoSpc) {
		t.Fatalf("growing past a lowered quota: %v", err)
	}
	if _, err := c.Write(ctx, fh, 0, data[:4096], nfs3.FileSync); err != nil {
		t.Fatalf("overwriting in place over the quota: %v", err)
	}
	if _, err := c.Truncate(ctx, fh, uint64(4*mib)); err != nil {
		t.Fatal(err)
	}
	written = 4 * mib
	readBack(written)
	v = checkUsage(t, e, "vol")
	if err := c.Unmount(ctx); err != nil {
		t.Fatal(err)
	}

	// restart: quota, list and usage come back
	e.stop()
	e2 := startVolEnv(t, root, state, proto == "rdma")
	v2, err := e2.adm.GetVolume(ctx, "vol")
	if err != nil {
		t.Fatal(err)
	}
	if v2.QuotaBytes != quota || v2.UsedBytes != v.UsedBytes || v2.UsedInodes != v.UsedInodes || len(v2.Access) != 1 {
		t.Fatalf("after restart: %+v, before %+v", v2, v)
	}
	c2, err := e2.mount(ctx, "/vol", proto)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	checkFsstat(t, c2, quota, v.UsedBytes)
	fh2, _, err := c2.LookupPath(ctx, c2.Root(), "data", false)
	if err != nil {
		t.Fatal(err)
	}
	f2 := c2.OpenFile(fh2)
	n, err := f2.WriteAt(ctx, data[written:written+2*mib], int64(written))
	if err != nil || n != 2*mib {
		t.Fatalf("write after restart: %d, %v", n, err)
	}
	if err := f2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e2, "vol")
}

// TestVolumeUsage checks, after each kind of modifying NFS call, that
// the usage the server keeps equals a walk of the volume's tree.
func TestVolumeUsage(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	testenv.MustWrite(t, filepath.Join(root, "vol", "pre", "existing"), randomBytes(100000, 1))
	if err := os.Link(filepath.Join(root, "vol", "pre", "existing"), filepath.Join(root, "vol", "pre", "hardlink")); err != nil {
		t.Fatal(err)
	}
	e := startVolEnv(t, root, state, false)
	ctx := ctxLong(t)
	if _, err := e.adm.PutVolume(ctx, "vol", 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "n", Addrs: []string{"127.0.0.0/8"}}); err != nil {
		t.Fatal(err)
	}
	c, err := e.mount(ctx, "/vol", "tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkUsage(t, e, "vol")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkUsage(t, e, "vol")
	}
	d, _, err := c.MakeDir(ctx, c.Root(), "d", 0o755)
	must("mkdir", err)
	fh, _, err := c.CreateFile(ctx, d, "f", 0o644, false)
	must("create", err)
	f := c.OpenFile(fh)
	_, err = f.WriteAt(ctx, randomBytes(3<<20+123, 2), 0)
	must("write", errors.Join(err, f.Commit(ctx)))
	_, err = c.Write(ctx, fh, 10<<20, []byte("sparse tail"), nfs3.FileSync)
	must("sparse write", err)
	_, err = c.Write(ctx, fh, 5<<20, randomBytes(8192, 3), nfs3.FileSync)
	must("write into a hole", err)
	_, _, err = c.MakeSymlink(ctx, d, "short", "f")
	must("symlink", err)
	_, _, err = c.MakeSymlink(ctx, d, "long", strings.Repeat("x/", 200))
	must("long symlink", err)
	_, err = c.Link(ctx, fh, c.Root(), "f-link")
	must("link", err)
	_, err = c.Mknod(ctx, d, "fifo", nfs3.TypeFIFO, nfs3.Sattr{SetMode: true, Mode: 0o644}, nfs3.SpecData{})
	must("mknod", err)
	many, _, err := c.MakeDir(ctx, c.Root(), "many", 0o755)
	must("mkdir", err)
	for i := range 300 {
		if _, _, err := c.CreateFile(ctx, many, strings.Repeat("n", 100)+string(rune('a'+i%26))+strings.Repeat("0", i%50)+"-"+string(rune('A'+i/26)), 0o644, false); err != nil {
			t.Fatal(err)
		}
	}
	checkUsage(t, e, "vol") // the directory grew
	_, err = c.Truncate(ctx, fh, 1<<20)
	must("truncate down", err)
	pre, _, err := c.LookupPath(ctx, c.Root(), "pre", false)
	must("lookup", err)
	_, err = c.Remove(ctx, pre, "hardlink")
	must("remove one of two links", err)
	_, err = c.Rename(ctx, d, "f", pre, "existing")
	must("rename over a file", err)
	_, err = c.Remove(ctx, c.Root(), "f-link")
	must("remove", err)
	_, err = c.Remove(ctx, pre, "existing")
	must("remove the last link", err)
	_, err = c.Remove(ctx, d, "fifo")
	must("remove fifo", err)
	_, err = c.Remove(ctx, d, "short")
	must("remove symlink", err)
	_, err = c.Remove(ctx, d, "long")
	must("remove long symlink", err)
	_, err = c.Rmdir(ctx, c.Root(), "d")
	must("rmdir", err)
}

// TestVolumeQuotaConcurrent writes past the quota with many WRITEs in
// flight (pipelined in one file, and several files at once): the usage
// never passes the quota (but for metadata blocks) and stays exact.
func TestVolumeQuotaConcurrent(t *testing.T) {
	const quota = 8 << 20
	e, c, _ := quotaEnv(t, quota)
	ctx := ctxLong(t)
	fh, _, err := c.CreateFile(ctx, c.Root(), "one", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenFile(fh).WriteAt(ctx, randomBytes(16<<20, 5), 0); !errors.Is(err, nfs3.ErrNoSpc) {
		t.Fatalf("16 MiB in flight into an 8 MiB quota: %v", err)
	}
	v := checkUsage(t, e, "vol")
	if v.UsedBytes > quota+64<<10 {
		t.Fatalf("usage %d past the quota %d", v.UsedBytes, quota)
	}
	if _, err := c.Remove(ctx, c.Root(), "one"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			fh, _, err := c.CreateFile(ctx, c.Root(), "f"+string(rune('0'+i)), 0o644, false)
			if err == nil {
				_, err = c.OpenFile(fh).WriteAt(ctx, randomBytes(4<<20, uint64(i)), 0)
			}
			errs <- err
		}()
	}
	nospc := 0
	for range 4 {
		if err := <-errs; errors.Is(err, nfs3.ErrNoSpc) {
			nospc++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if nospc == 0 {
		t.Fatal("16 MiB from 4 writers fit an 8 MiB quota")
	}
	v = checkUsage(t, e, "vol")
	if v.UsedBytes > quota+64<<10 {
		t.Fatalf("usage %d past the quota %d", v.UsedBytes, quota)
	}
}

// quotaEnv starts a server with volume "vol" (quota bytes, 0: unlimited)
// granted to 127.0.0.1 and mounts it over TCP.
func quotaEnv(t *testing.T, quota int64) (*volEnv, *client.Client, string) {
	t.Helper()
	root, state := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		t.Fatal(err)
	}
	e := startVolume(t, root, state, false, quota, "n")
	ctx := ctxLong(t)
	c, err := e.mount(ctx, "/vol", "tcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return e, c, filepath.Join(root, "vol")
}

// syncfs is the kernel's background writeback, on demand: it writes back
// every dirty page of dir's file system, allocating what delayed
// allocation left for later, outside any NFS call.
func syncfs(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

func blocksOf(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// writeFragmented writes n single blocks UNSTABLE, one block apart: the
// data blocks are in st_blocks at once (delayed allocation counts them
// when written), but the file needs more extents than the inode holds, so
// writeback allocates an extent tree block besides them.
func writeFragmented(t *testing.T, c *client.Client, fh nfs3.FH, n int) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	blk := randomBytes(4096, uint64(n))
	for i := range n {
		if _, err := c.Write(ctx, fh, uint64(i)*8192, blk, nfs3.Unstable); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVolumeUsageWriteback checks that blocks the kernel allocates at
// writeback, between NFS calls (ext4's and XFS's delayed allocation of
// extent blocks), are counted exactly: by the admin API's usage at once,
// by the next call touching the file, for many files at a time. With
// usage charged from each call's own pre- and post-operation stat, they
// were missed until a rescan.
func TestVolumeUsageWriteback(t *testing.T) {
	e, c, dir := quotaEnv(t, 1<<30)
	ctx := ctxLong(t)

	fh, _, err := c.CreateFile(ctx, c.Root(), "frag", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	writeFragmented(t, c, fh, 40)
	checkUsage(t, e, "vol")
	before := blocksOf(t, filepath.Join(dir, "frag"))
	syncfs(t, dir)
	after := blocksOf(t, filepath.Join(dir, "frag"))
	t.Logf("writeback allocated %d bytes besides the data", after-before)
	if after == before {
		t.Skipf("the file system of %s allocated nothing at writeback (tmpfs, say): nothing here for the test to check", dir)
	}
	checkUsage(t, e, "vol") // the dirty file was stat'ed again
	if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")

	// the next call touching the file counts what writeback allocated
	// since the last one (here a stable WRITE: the file is clean after it,
	// so only that call can have counted it)
	fh2, _, err := c.CreateFile(ctx, c.Root(), "frag2", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	writeFragmented(t, c, fh2, 40)
	syncfs(t, dir)
	if _, err := c.Write(ctx, fh2, 1<<20, []byte("tail"), nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")

	// many small files, each with a block writeback added, each touched
	// once afterwards by a COMMIT
	d, _, err := c.MakeDir(ctx, c.Root(), "many", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var fhs []nfs3.FH
	for i := range 30 {
		fh, _, err := c.CreateFile(ctx, d, "f"+strconv.Itoa(i), 0o644, false)
		if err != nil {
			t.Fatal(err)
		}
		writeFragmented(t, c, fh, 6)
		fhs = append(fhs, fh)
	}
	syncfs(t, dir)
	for _, fh := range fhs {
		if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	checkUsage(t, e, "vol")
}

// TestVolumeQuotaLocalGrowth grows a file of a volume through the local
// file system between NFS calls (as writeback would, in larger steps):
// the next call touching the file counts the growth exactly (WRITE,
// SETATTR, REMOVE, with hard links), and a WRITE that would pass the quota
// with it is refused.
func TestVolumeQuotaLocalGrowth(t *testing.T) {
	const mib = 1 << 20
	const quota = 4 * mib
	e, c, dir := quotaEnv(t, quota)
	ctx := ctxLong(t)
	grow := func(name string, off int64, n int) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(randomBytes(n, uint64(off)), off); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	fh, _, err := c.CreateFile(ctx, c.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, fh, 0, randomBytes(4096, 1), nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	grow("f", 4096, 3*mib)
	if _, err := c.Write(ctx, fh, 0, []byte{1}, nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	if _, err := c.Write(ctx, fh, 3*mib+4096, randomBytes(mib, 2), nfs3.FileSync); !errors.Is(err, nfs3.ErrNoSpc) {
		t.Fatalf("a 1 MiB WRITE into a 4 MiB volume holding 3 MiB: %v, want NFS3ERR_NOSPC", err)
	}
	checkUsage(t, e, "vol")

	// SETATTR of the size after a local growth
	grow("f", 3*mib+4096, 512<<10)
	if _, err := c.Truncate(ctx, fh, 8192); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")

	// REMOVE after a local growth, with a second link counted once
	if _, err := c.Link(ctx, fh, c.Root(), "f2"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	grow("f", 8192, mib)
	if _, err := c.Remove(ctx, c.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	grow("f2", mib+8192, mib)
	if _, err := c.Remove(ctx, c.Root(), "f2"); err != nil {
		t.Fatal(err)
	}
	v := checkUsage(t, e, "vol")
	if v.UsedInodes != 1 {
		t.Fatalf("%d inodes used in an empty volume", v.UsedInodes)
	}
}

// TestVolumeQuotaFlushDirty fills a volume to its quota exactly with
// UNSTABLE writes: the allowance kept for what writeback may still
// allocate to dirty files would refuse the last one, so the server syncs
// the dirty files and decides again on exact figures, as ext4 does before
// it reports ENOSPC; one block more is refused.
func TestVolumeQuotaFlushDirty(t *testing.T) {
	const mib = 1 << 20
	const quota = 2 * mib
	e, c, _ := quotaEnv(t, quota)
	ctx := ctxLong(t)
	fh, _, err := c.CreateFile(ctx, c.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	v := checkUsage(t, e, "vol")
	free := quota - v.UsedBytes // the root directory's block
	if _, err := c.Write(ctx, fh, 0, randomBytes(mib, 1), nfs3.Unstable); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, fh, mib, randomBytes(int(free-mib), 2), nfs3.Unstable); err != nil {
		t.Fatalf("a WRITE filling the quota exactly: %v", err)
	}
	if _, err := c.Write(ctx, fh, uint64(free), randomBytes(4096, 3), nfs3.Unstable); !errors.Is(err, nfs3.ErrNoSpc) {
		t.Fatalf("a WRITE past a full quota: %v, want NFS3ERR_NOSPC", err)
	}
	if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
		t.Fatal(err)
	}
	if v := checkUsage(t, e, "vol"); v.UsedBytes != quota {
		t.Fatalf("usage %d, want the quota %d", v.UsedBytes, quota)
	}
}

// TestVolumeRescan checks that Rescan counts what local processes
// changed in a volume, and that rescans running while NFS calls create,
// write, rename and remove files leave the usage exact.
func TestVolumeRescan(t *testing.T) {
	e, c, dir := quotaEnv(t, 1<<30)
	ctx := ctxLong(t)
	for i := range 20 {
		testenv.MustWrite(t, filepath.Join(dir, "local", strconv.Itoa(i)), randomBytes(10000*i, uint64(i)))
	}
	if err := os.Symlink(strings.Repeat("y/", 100), filepath.Join(dir, "local", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Rescan(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	if err := os.RemoveAll(filepath.Join(dir, "local")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Rescan(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
	if _, err := e.reg.Rescan(ctx, "nope"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Rescan of an unregistered volume: %v", err)
	}

	dirs := make([]nfs3.FH, 4)
	for i := range dirs {
		fh, _, err := c.MakeDir(ctx, c.Root(), "d"+strconv.Itoa(i), 0o755)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = fh
	}
	stop := make(chan struct{})
	scans := make(chan error, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				t.Logf("%d rescans during the calls", n)
				scans <- nil
				return
			default:
			}
			if _, err := e.reg.Rescan(ctx, "vol"); err != nil {
				scans <- err
				return
			}
			n++
		}
	}()
	work := make(chan error, 2)
	for w := range 2 {
		go func() {
			work <- func() error {
				for i := range 60 {
					name := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
					d := dirs[(i+w)%len(dirs)]
					fh, _, err := c.CreateFile(ctx, d, name, 0o644, false)
					if err != nil {
						return err
					}
					stable := nfs3.Unstable
					if i%2 == 0 {
						stable = nfs3.FileSync
					}
					if _, err := c.Write(ctx, fh, uint64(i%7)*8192, randomBytes(8192*(1+i%5), uint64(i)), stable); err != nil {
						return err
					}
					if _, err := c.Rename(ctx, d, name, dirs[(i+w+1)%len(dirs)], name); err != nil {
						return err
					}
					if i%3 == 0 {
						if _, err := c.Remove(ctx, dirs[(i+w+1)%len(dirs)], name); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	var werr error
	for range 2 {
		werr = errors.Join(werr, <-work)
	}
	close(stop)
	if err := errors.Join(werr, <-scans); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, e, "vol")
}
