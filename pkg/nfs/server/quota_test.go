package server

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		v, err := e.adm.GetVolume(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		u, err := treeUsage(e.srv.rootFD, p)
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

// checkUsageWithin is checkUsage allowing the kept usage to fall short of
// the tree by up to slack bytes per inode (blocks allocated by background
// writeback, outside any NFS operation).
func checkUsageWithin(t *testing.T, e *volEnv, p string, slack int64) admin.Volume {
	t.Helper()
	v, err := e.adm.GetVolume(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	u, err := treeUsage(e.srv.rootFD, p)
	if err != nil {
		t.Fatal(err)
	}
	if v.UsedInodes != u.inodes || v.UsedBytes > u.bytes || v.UsedBytes < u.bytes-slack*u.inodes {
		t.Fatalf("volume %s: usage kept %d bytes, %d inodes; the tree holds %d bytes, %d inodes (slack %d per inode)", p, v.UsedBytes, v.UsedInodes, u.bytes, u.inodes, slack)
	}
	return v
}

func checkFsstat(t *testing.T, c *client.Client, quota, used int64) {
	t.Helper()
	fs, err := c.Fsstat(ctxT(t), c.Root())
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
	e := startVolEnv(t, root, state, proto == "rdma")
	ctx := ctxLong(t)
	const mib = 1 << 20
	const quota = 8 * mib
	if _, err := e.adm.PutVolume(ctx, "vol", quota); err != nil {
		t.Fatal(err)
	}
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "node-a", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
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
	mustWrite(t, filepath.Join(root, "vol", "pre", "existing"), randomBytes(100000, 1))
	os.Link(filepath.Join(root, "vol", "pre", "existing"), filepath.Join(root, "vol", "pre", "hardlink"))
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
	root, state := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		t.Fatal(err)
	}
	e := startVolEnv(t, root, state, false)
	ctx := ctxLong(t)
	const quota = 8 << 20
	if _, err := e.adm.PutVolume(ctx, "vol", quota); err != nil {
		t.Fatal(err)
	}
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "n", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	c, err := e.mount(ctx, "/vol", "tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
