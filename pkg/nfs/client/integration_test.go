package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

func mountOpts(g *ganesha, uid, gid uint32) Options {
	return Options{
		Server: "127.0.0.1", MountPort: g.MountPort, NFSPort: g.NFSPort, Export: g.Export,
		AuthSys: sunrpc.AuthSysParams{MachineName: "nfsclient-test", UID: uid, GID: gid},
	}
}

// mountT mounts the Ganesha export as root and makes a fresh directory for
// the test; it returns the client and the directory's handle.
func mountT(tb testing.TB) (*Client, nfs3.FH) {
	tb.Helper()
	g := needGanesha(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Mount(ctx, mountOpts(g, 0, 0))
	if err != nil {
		tb.Fatalf("Mount: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Unmount(ctx); err != nil {
			tb.Errorf("Unmount: %v", err)
		}
	})
	name := fmt.Sprintf("%s-%d", sanitize(tb.Name()), rand.Uint32())
	dir, _, err := c.MakeDir(ctx, c.Root(), name, 0o755)
	if err != nil {
		tb.Fatalf("MakeDir %s: %v", name, err)
	}
	return c, dir
}

func sanitize(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestGaneshaMountInfo(t *testing.T) {
	c, dir := mountT(t)
	ctx := tctx(t)
	if c.RSize() <= 0 || c.RSize() > MaxIOSize || c.WSize() <= 0 || c.WSize() > MaxIOSize {
		t.Fatalf("rsize %d wsize %d", c.RSize(), c.WSize())
	}
	fi, err := c.Fsinfo(ctx, c.Root())
	if err != nil {
		t.Fatal(err)
	}
	if c.RSize() > int(fi.RTMax) || c.WSize() > int(fi.WTMax) {
		t.Errorf("rsize %d wsize %d above rtmax %d wtmax %d", c.RSize(), c.WSize(), fi.RTMax, fi.WTMax)
	}
	t.Logf("fsinfo: rtmax %d rtpref %d wtmax %d wtpref %d dtpref %d props %#x; rsize %d wsize %d",
		fi.RTMax, fi.RTPref, fi.WTMax, fi.WTPref, fi.DTPref, fi.Properties, c.RSize(), c.WSize())
	st, err := c.Fsstat(ctx, dir)
	if err != nil || st.TBytes == 0 {
		t.Fatalf("Fsstat: %+v, %v", st, err)
	}
	pc, err := c.Pathconf(ctx, dir)
	if err != nil || pc.NameMax == 0 {
		t.Fatalf("Pathconf: %+v, %v", pc, err)
	}
	if err := c.Null(ctx); err != nil {
		t.Fatalf("NULL: %v", err)
	}
	// rpcbind: GETPORT answers for MOUNT v3 and NFSv3 over TCP.
	for _, prog := range []uint32{100005, nfs3.Program} {
		if p, err := GetPort(ctx, "127.0.0.1:111", prog, 3, sunrpc.TCPOptions{}); err != nil || p == 0 {
			t.Errorf("GetPort %d: %d, %v", prog, p, err)
		}
	}
	if _, err := GetPort(ctx, "127.0.0.1:111", 399999, 1, sunrpc.TCPOptions{}); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("GetPort of an unknown program: %v, want ErrNotRegistered", err)
	}
	// MOUNT of a path that is not exported.
	bad := mountOpts(srv, 0, 0)
	bad.Export = "/not/exported"
	if _, err := Mount(ctx, bad); !errors.Is(err, ErrMountFailed) {
		t.Errorf("Mount of an unexported path: %v, want ErrMountFailed", err)
	}
	// Mount through rpcbind (ports 0), if the registration is still ours
	// (rpcbind is shared: another Ganesha started later takes it over).
	o := mountOpts(srv, 0, 0)
	if p, _ := GetPort(ctx, "127.0.0.1:111", 100005, 3, sunrpc.TCPOptions{}); p != srv.MountPort {
		t.Logf("rpcbind maps MOUNT to %d, not our %d: mount via rpcbind not checked", p, srv.MountPort)
		return
	}
	o.MountPort, o.NFSPort = 0, 0
	c2, err := Mount(ctx, o)
	if err != nil {
		t.Fatalf("Mount via rpcbind: %v", err)
	}
	if !fhEqual(c2.Root(), c.Root()) {
		t.Errorf("root via rpcbind %v, direct %v", c2.Root(), c.Root())
	}
	c2.Unmount(ctx)
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestGaneshaReadWrite(t *testing.T) {
	c, dir := mountT(t)
	ctx := tctx(t)

	// Small file, single READ/WRITE procedures.
	fh, _, err := c.CreateFile(ctx, dir, "small", 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	small := []byte("hello, ganesha\n")
	wr, err := c.Write(ctx, fh, 0, small, nfs3.FileSync)
	if err != nil || int(wr.Count) != len(small) {
		t.Fatalf("WRITE: %+v %v", wr, err)
	}
	buf := make([]byte, 100)
	n, eof, attr, err := c.Read(ctx, fh, 0, buf)
	if err != nil || !eof || !bytes.Equal(buf[:n], small) || !attr.Set || attr.Attr.Size != uint64(len(small)) {
		t.Fatalf("READ: %q eof=%v attr=%+v err=%v", buf[:n], eof, attr, err)
	}
	// The server's file matches too.
	if got, _ := os.ReadFile(filepath.Join(srv.Dir, dirName(t, c, dir), "small")); !bytes.Equal(got, small) {
		t.Errorf("server file %q", got)
	}

	// 64 MiB through the pipelined, unstable path.
	const big = 64 << 20
	data := randBytes(big, 1)
	f := c.OpenFile(mustCreate(t, c, dir, "big"))
	start := time.Now()
	if n, err := f.WriteAt(ctx, data, 0); err != nil || n != big {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if f.Uncommitted() == 0 {
		t.Log("server answered every UNSTABLE write as stable")
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if f.Uncommitted() != 0 || f.Resent() != 0 {
		t.Errorf("after Commit: %d uncommitted, %d resent", f.Uncommitted(), f.Resent())
	}
	wdur := time.Since(start)
	got := make([]byte, big+4096)
	start = time.Now()
	n, err = f.ReadAt(ctx, got, 0)
	if n != big || err != io.EOF {
		t.Fatalf("ReadAt: %d, %v; want %d, EOF", n, err, big)
	}
	if !bytes.Equal(got[:big], data) {
		t.Fatal("64 MiB read back differs")
	}
	t.Logf("64 MiB: write+commit %v, read %v", wdur, time.Since(start))
	// Unaligned read in the middle.
	n, err = f.ReadAt(ctx, got[:3<<20+17], 12345)
	if err != nil || !bytes.Equal(got[:n], data[12345:12345+3<<20+17]) {
		t.Fatalf("unaligned ReadAt: %d, %v", n, err)
	}

	// Sparse: write past 4 GiB.
	sf := c.OpenFile(mustCreate(t, c, dir, "sparse"))
	off := int64(5<<30 + 123)
	tailData := randBytes(300000, 2)
	if _, err := sf.WriteAt(ctx, tailData, off); err != nil {
		t.Fatal(err)
	}
	if err := sf.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := c.Getattr(ctx, sf.FH())
	if err != nil || a.Size != uint64(off)+uint64(len(tailData)) {
		t.Fatalf("sparse size %d, %v", a.Size, err)
	}
	got = make([]byte, len(tailData)+100)
	n, err = sf.ReadAt(ctx, got, off-100)
	if n != len(tailData)+100 || err != nil || !bytes.Equal(got[100:], tailData) || !bytes.Equal(got[:100], make([]byte, 100)) {
		t.Fatalf("sparse read: %d, %v", n, err)
	}
	n, err = sf.ReadAt(ctx, got[:10], int64(a.Size))
	if n != 0 || err != io.EOF {
		t.Fatalf("read at EOF: %d, %v", n, err)
	}
}

func mustCreate(t testing.TB, c *Client, dir nfs3.FH, name string) nfs3.FH {
	t.Helper()
	fh, _, err := c.CreateFile(context.Background(), dir, name, 0o644, true)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return fh
}

// dirName finds the name of dir in the export root (tests make their
// directory right under it).
func dirName(t testing.TB, c *Client, dir nfs3.FH) string {
	for e, err := range c.Readdirplus(context.Background(), c.Root()) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Handle.Set && fhEqual(e.Handle.FH, dir) {
			return e.Name
		}
	}
	t.Fatal("test directory not found")
	return ""
}

func TestGaneshaReaddirplus10k(t *testing.T) {
	c, dir := mountT(t)
	ctx := tctx(t)
	const n = 10000
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("entry-%05d-%s", i, "abcdefghij"[:i%10])
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := c.Create(ctx, dir, want[i], nfs3.CreateHow{Mode: nfs3.Guarded}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	var got []string
	for e, err := range c.Readdirplus(ctx, dir) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if !e.Handle.Set || !e.Attr.Set || e.Attr.Attr.Type != nfs3.TypeReg {
			t.Fatalf("entry %q without handle or attributes: %+v", e.Name, e)
		}
		got = append(got, e.Name)
	}
	if len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
	sort.Strings(got)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("entry %d is %q, want %q", i, got[i], want[i])
		}
	}
	// Early stop is allowed.
	k := 0
	for range c.Readdirplus(ctx, dir) {
		if k++; k == 3 {
			break
		}
	}
	// A cookie the server never gave: BAD_COOKIE (or an empty page) from the server.
	_, err := c.ReaddirplusOnce(ctx, dir, 1<<62, nfs3.CookieVerf{1, 2, 3}, 4096, 32768)
	t.Logf("READDIRPLUS with a bogus cookie/verifier: %v", err)
}

func TestGaneshaNamespace(t *testing.T) {
	c, dir := mountT(t)
	ctx := tctx(t)
	fh, attr, err := c.CreateFile(ctx, dir, "a", 0o640, true)
	if err != nil || attr.Mode&0o777 != 0o640 || attr.Type != nfs3.TypeReg {
		t.Fatalf("create: %+v %v", attr, err)
	}
	// EXIST from a GUARDED create.
	if _, _, err := c.CreateFile(ctx, dir, "a", 0o640, true); !errors.Is(err, nfs3.ErrExist) || !errors.Is(err, fs.ErrExist) || !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("create existing: %v", err)
	}
	// NOENT.
	if _, err := c.Lookup(ctx, dir, "missing"); !errors.Is(err, nfs3.ErrNoEnt) || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup missing: %v", err)
	}
	// Rename, then the old name is gone and the handle is the same.
	if _, err := c.Rename(ctx, dir, "a", dir, "b"); err != nil {
		t.Fatal(err)
	}
	lr, err := c.Lookup(ctx, dir, "b")
	if err != nil || !fhEqual(lr.Object, fh) || !lr.DirAttr.Set {
		t.Fatalf("lookup b: %+v %v", lr, err)
	}
	// Link: nlink 2.
	l, err := c.Link(ctx, fh, dir, "b-link")
	if err != nil || !l.FileAttr.Set || l.FileAttr.Attr.Nlink != 2 {
		t.Fatalf("link: %+v %v", l, err)
	}
	// Symlink, readlink, LookupPath through it.
	sub, _, err := c.MakeDir(ctx, dir, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, mustCreate(t, c, sub, "f"), 0, []byte("via link"), nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	sl, sa, err := c.MakeSymlink(ctx, dir, "s", "sub")
	if err != nil || sa.Type != nfs3.TypeLnk {
		t.Fatalf("symlink: %+v %v", sa, err)
	}
	target, rattr, err := c.Readlink(ctx, sl)
	if err != nil || target != "sub" || !rattr.Set {
		t.Fatalf("readlink: %q %+v %v", target, rattr, err)
	}
	pfh, pa, err := c.LookupPath(ctx, dir, "s/f", false)
	if err != nil || pa.Size != 8 {
		t.Fatalf("LookupPath s/f: %+v %v", pa, err)
	}
	if _, pa, err = c.LookupPath(ctx, dir, "s", false); err != nil || pa.Type != nfs3.TypeLnk {
		t.Fatalf("LookupPath s (no follow): %+v %v", pa, err)
	}
	if _, pa, err = c.LookupPath(ctx, dir, "./s/../sub/./f", true); err != nil || pa.Size != 8 {
		t.Fatalf("LookupPath with dots: %+v %v", pa, err)
	}
	if _, _, err := c.MakeSymlink(ctx, dir, "abs", "/etc"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupPath(ctx, dir, "abs/passwd", false); !errors.Is(err, ErrBadPath) {
		t.Fatalf("absolute link: %v", err)
	}
	long := string(bytes.Repeat([]byte("x/"), 1000)) + "end"
	if _, err := c.Symlink(ctx, dir, "long", long, nfs3.Sattr{}); err != nil {
		t.Fatal(err)
	}
	if lfh, err := c.Lookup(ctx, dir, "long"); err != nil {
		t.Fatal(err)
	} else if got, _, err := c.Readlink(ctx, lfh.Object); err != nil || got != long {
		t.Fatalf("long readlink: %d bytes, %v", len(got), err)
	}
	if lfh, err := c.Lookup(ctx, sub, "f"); err != nil || !fhEqual(lfh.Object, pfh) {
		t.Fatalf("LookupPath handle differs from LOOKUP: %v", err)
	}
	if h, a, err := c.LookupPath(ctx, dir, "", false); err != nil || !fhEqual(h, dir) || a.Type != nfs3.TypeDir {
		t.Fatalf("LookupPath empty: %v", err)
	}
	if h, _, err := c.LookupPath(ctx, dir, "/../..", false); err != nil || !fhEqual(h, c.Root()) {
		t.Fatalf("LookupPath /../..: %v", err)
	}

	// Setattr: mode, size, times.
	if a, err := c.Chmod(ctx, fh, 0o600); err != nil || a.Mode&0o7777 != 0o600 {
		t.Fatalf("chmod: %o %v", a.Mode, err)
	}
	if _, err := c.Write(ctx, fh, 0, bytes.Repeat([]byte{7}, 10000), nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	if a, err := c.Truncate(ctx, fh, 100); err != nil || a.Size != 100 {
		t.Fatalf("truncate: %d %v", a.Size, err)
	}
	at := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	mt := time.Date(2011, 2, 3, 4, 5, 6, 0, time.UTC)
	if a, err := c.SetTimes(ctx, fh, at, mt); err != nil || !a.Atime.GoTime().Equal(at) || !a.Mtime.GoTime().Equal(mt) {
		t.Fatalf("set times: %v %v %v", a.Atime.GoTime(), a.Mtime.GoTime(), err)
	}
	// Guarded SETATTR with a wrong ctime: NOT_SYNC.
	if _, err := c.Setattr(ctx, fh, nfs3.Sattr{SetMode: true, Mode: 0o644}, nfs3.SattrGuard{Check: true, Ctime: nfs3.Time{Seconds: 1}}); !errors.Is(err, nfs3.ErrNotSync) {
		t.Fatalf("guarded setattr: %v", err)
	}
	// Access as root.
	if got, err := c.CheckAccess(ctx, fh, nfs3.AccessRead|nfs3.AccessModify); err != nil || got&nfs3.AccessRead == 0 {
		t.Fatalf("access: %#x %v", got, err)
	}

	// NOTEMPTY, then remove and rmdir.
	if _, err := c.Rmdir(ctx, dir, "sub"); !errors.Is(err, nfs3.ErrNotEmpty) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if _, err := c.Remove(ctx, sub, "f"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Rmdir(ctx, dir, "sub"); err != nil || !r.DirWcc.After.Set {
		t.Fatalf("rmdir: %+v %v", r, err)
	}
	// STALE: remove every name of a file, then use its handle.
	for _, n := range []string{"b", "b-link"} {
		if _, err := c.Remove(ctx, dir, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Getattr(ctx, fh); !errors.Is(err, nfs3.ErrStale) || !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("getattr of a removed file: %v, want STALE", err)
	}
	// ACCES: a non-root user on a 0700 directory owned by root.
	priv, _, err := c.MakeDir(ctx, dir, "private", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	o := mountOpts(srv, 1000, 1000)
	u, err := Mount(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Unmount(ctx)
	if _, err := u.Lookup(ctx, priv, "x"); !errors.Is(err, nfs3.ErrAccess) || !errors.Is(err, fs.ErrPermission) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("lookup in 0700 dir as uid 1000: %v, want ACCES", err)
	}
	if _, _, err := u.CreateFile(ctx, priv, "x", 0o644, true); !errors.Is(err, nfs3.ErrAccess) {
		t.Fatalf("create in 0700 dir as uid 1000: %v", err)
	}
	if got, err := u.CheckAccess(ctx, priv, nfs3.AccessRead|nfs3.AccessLookup|nfs3.AccessModify); err != nil || got != 0 {
		t.Fatalf("ACCESS as uid 1000 on 0700 dir: %#x %v, want 0", got, err)
	}
}

func TestGaneshaCommitVerifier(t *testing.T) {
	c, dir := mountT(t)
	ctx := tctx(t)
	fh := mustCreate(t, c, dir, "c")
	w1, err := c.Write(ctx, fh, 0, []byte("abc"), nfs3.Unstable)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := c.Write(ctx, fh, 3, []byte("def"), nfs3.Unstable)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := c.Commit(ctx, fh, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if w1.Verf != w2.Verf || cr.Verf != w1.Verf {
		t.Fatalf("verifiers: write %x %x, commit %x", w1.Verf, w2.Verf, cr.Verf)
	}
	if !cr.Wcc.After.Set || cr.Wcc.After.Attr.Size != 6 {
		t.Fatalf("commit wcc: %+v", cr.Wcc)
	}
	f := c.OpenFile(fh)
	if _, err := f.WriteAt(ctx, randBytes(3<<20, 3), 6); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil || f.Resent() != 0 || f.Uncommitted() != 0 {
		t.Fatalf("Close: %v resent %d uncommitted %d", err, f.Resent(), f.Uncommitted())
	}
}
