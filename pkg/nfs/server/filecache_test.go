package server

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// openFDsOf counts this process's descriptors open on path (its removed
// inode included: "path (deleted)").
func openFDsOf(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (l == path || l == path+" (deleted)") {
			n++
		}
	}
	return n
}

// cacheFile creates name (data in it) under root and returns its handle.
func cacheFile(t *testing.T, c *client.Client, root, name string, data []byte) nfs3.FH {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	lr, err := c.Lookup(context.Background(), c.Root(), name)
	if err != nil || lr.Status != nfs3.OK {
		t.Fatal("LOOKUP:", lr.Status, err)
	}
	return lr.Object
}

func readOK(t *testing.T, c *client.Client, fh nfs3.FH, want []byte) {
	t.Helper()
	buf := make([]byte, len(want)+10)
	n, _, _, err := c.Read(context.Background(), fh, 0, buf)
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("READ: %d bytes, %v; want %q", n, err, want)
	}
}

// TestFileCache: READs and WRITEs of a file open it once per access mode
// and keep it open (the counters and /proc/self/fd show one descriptor
// each), the data read and written through the cached descriptors is the
// file's, and the file is closed by REMOVE, by RENAME over it, when it is
// removed outside the server (the next READ: NFS3ERR_STALE), when idle,
// and for the bound; a chmod outside the server is seen by the next READ's
// permission check. Over TCP and RDMA.
func TestFileCache(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) {
			srv, c, root := mapServer(t, proto, 0)
			ctx := context.Background()
			data := []byte("cached file contents")
			fh := cacheFile(t, c, root, "f", data)
			path := filepath.Join(root, "f")
			for range 5 {
				readOK(t, c, fh, data)
			}
			st := srv.FileCacheStats()
			if st.Open != 1 || st.Misses != 1 || st.Hits != 4 {
				t.Fatalf("after 5 READs: %+v, want 1 open, 1 miss, 4 hits", st)
			}
			if n := openFDsOf(t, path); n != 1 {
				t.Fatalf("%d descriptors open on the file, want 1", n)
			}
			for i := range 3 {
				wr, err := c.Write(ctx, fh, uint64(i), []byte("C"), nfs3.FileSync)
				if err != nil || wr.Status != nfs3.OK || wr.Count != 1 {
					t.Fatal("WRITE:", wr.Status, err)
				}
			}
			copy(data, "CCC")
			hits := srv.FileCacheStats().Hits
			if cr, err := c.Commit(ctx, fh, 0, 0); err != nil || cr.Status != nfs3.OK {
				t.Fatal("COMMIT:", cr.Status, err)
			}
			if got := srv.FileCacheStats().Hits; got != hits+1 {
				t.Fatalf("COMMIT after WRITEs: %d hits, want %d (the WRITEs' file)", got, hits+1)
			}
			readOK(t, c, fh, data)
			if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
				t.Fatalf("file holds %q after WRITEs, want %q", got, data)
			}
			if n := openFDsOf(t, path); n != 2 {
				t.Fatalf("%d descriptors open on the file after WRITEs, want 2 (read, write)", n)
			}

			// a SETATTR of the size truncates through the WRITEs'
			// descriptor; one of a file no WRITE opened opens it for
			// the WRITEs that follow
			hits = srv.FileCacheStats().Hits
			if sr, err := c.Setattr(ctx, fh, nfs3.Sattr{SetSize: true, Size: 3}, nfs3.SattrGuard{}); err != nil || sr.Status != nfs3.OK {
				t.Fatal("SETATTR size 3:", sr.Status, err)
			}
			if got := srv.FileCacheStats().Hits; got != hits+1 {
				t.Fatalf("SETATTR size after WRITEs: %d hits, want %d", got, hits+1)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() != 3 {
				t.Fatalf("after SETATTR size 3: %v, %v", fi, err)
			}
			if n := openFDsOf(t, path); n != 2 {
				t.Fatalf("%d descriptors open on the file after SETATTR, want 2 (read, write)", n)
			}
			if wr, err := c.Write(ctx, fh, 3, data[3:], nfs3.FileSync); err != nil || wr.Status != nfs3.OK {
				t.Fatal("WRITE after SETATTR:", wr.Status, err)
			}
			tr := cacheFile(t, c, root, "t", data)
			st = srv.FileCacheStats()
			if sr, err := c.Setattr(ctx, tr, nfs3.Sattr{SetSize: true}, nfs3.SattrGuard{}); err != nil || sr.Status != nfs3.OK {
				t.Fatal("SETATTR size 0:", sr.Status, err)
			}
			if wr, err := c.Write(ctx, tr, 0, []byte("T"), nfs3.FileSync); err != nil || wr.Status != nfs3.OK {
				t.Fatal("WRITE after SETATTR size 0:", wr.Status, err)
			}
			if got := srv.FileCacheStats(); got.Misses != st.Misses+1 || got.Hits != st.Hits+1 {
				t.Fatalf("SETATTR size 0 then WRITE: %+v, want one miss and one hit more than %+v", got, st)
			}
			if got, _ := os.ReadFile(filepath.Join(root, "t")); string(got) != "T" {
				t.Fatalf("truncated then written file holds %q, want \"T\"", got)
			}

			// permission checked on every call: the owner's chmod 0600
			// outside the server keeps uid 1000 out, though the file is
			// open in the cache
			other, err := client.NewCred(sunrpc.AuthSysParams{MachineName: "test", UID: 1000, GID: 1000})
			if err != nil {
				t.Fatal(err)
			}
			octx := client.WithCred(ctx, other)
			if _, _, _, err := c.Read(octx, fh, 0, make([]byte, 10)); err != nil {
				t.Fatal("READ as uid 1000 of a 0644 file:", err)
			}
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := c.Read(octx, fh, 0, make([]byte, 10)); !errors.Is(err, nfs3.ErrAccess) {
				t.Fatalf("READ as uid 1000 after chmod 0600: %v, want NFS3ERR_ACCES", err)
			}

			// REMOVE closes it
			if rr, err := c.Remove(ctx, c.Root(), "f"); err != nil || rr.Status != nfs3.OK {
				t.Fatal("REMOVE:", rr.Status, err)
			}
			if n := openFDsOf(t, path); n != 0 {
				t.Fatalf("%d descriptors open on the file after REMOVE", n)
			}
			if _, _, _, err := c.Read(ctx, fh, 0, make([]byte, 10)); !errors.Is(err, nfs3.ErrStale) {
				t.Fatalf("READ after REMOVE: %v, want NFS3ERR_STALE", err)
			}

			// RENAME over it closes it
			g := cacheFile(t, c, root, "g", data)
			readOK(t, c, g, data)
			if err := os.WriteFile(filepath.Join(root, "h"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if rr, err := c.Rename(ctx, c.Root(), "h", c.Root(), "g"); err != nil || rr.Status != nfs3.OK {
				t.Fatal("RENAME:", rr.Status, err)
			}
			if n := openFDsOf(t, filepath.Join(root, "g")); n != 0 {
				t.Fatalf("%d descriptors open on the file RENAME replaced", n)
			}

			// removed outside the server: the next READ finds it
			// unlinked, closes it and answers NFS3ERR_STALE
			x := cacheFile(t, c, root, "x", data)
			readOK(t, c, x, data)
			if err := os.Remove(filepath.Join(root, "x")); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := c.Read(ctx, x, 0, make([]byte, 10)); !errors.Is(err, nfs3.ErrStale) {
				t.Fatalf("READ of a file removed outside: %v, want NFS3ERR_STALE", err)
			}
			if n := openFDsOf(t, filepath.Join(root, "x")); n != 0 {
				t.Fatalf("%d descriptors open on the file removed outside, after a READ", n)
			}

			// the bound: at most max files open
			srv.files.mu.Lock()
			srv.files.max = 3
			srv.files.mu.Unlock()
			for i := range 8 {
				name := "b" + strconv.Itoa(i)
				readOK(t, c, cacheFile(t, c, root, name, data), data)
			}
			if st := srv.FileCacheStats(); st.Open > 3 {
				t.Fatalf("%d files open over the bound 3", st.Open)
			}
			open := 0
			for i := range 8 {
				open += openFDsOf(t, filepath.Join(root, "b"+strconv.Itoa(i)))
			}
			if open > 3 {
				t.Fatalf("%d descriptors open over the bound 3", open)
			}
		})
	}
}

// TestFileCacheIdle: a file nobody reads is closed after the idle time, so
// that a file removed outside the server does not keep its space.
func TestFileCacheIdle(t *testing.T) {
	srv, c, root := mapServer(t, "tcp", 0)
	srv.files.mu.Lock()
	srv.files.idle = 100 * time.Millisecond
	srv.files.mu.Unlock()
	data := []byte("idle")
	fh := cacheFile(t, c, root, "f", data)
	readOK(t, c, fh, data)
	path := filepath.Join(root, "f")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if n := openFDsOf(t, path); n != 1 {
		t.Fatalf("%d descriptors open on the file just read, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for openFDsOf(t, path) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the removed file still open 5 s after its last READ: %+v", srv.FileCacheStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := srv.FileCacheStats(); st.Open != 0 {
		t.Fatalf("%+v after the idle time, want none open", st)
	}
}

// TestFileCacheClose: closing the cache (Server.Close does) closes its
// files.
func TestFileCacheClose(t *testing.T) {
	srv, c, root := mapServer(t, "tcp", 0)
	data := []byte("close")
	readOK(t, c, cacheFile(t, c, root, "f", data), data)
	srv.files.close()
	if n := openFDsOf(t, filepath.Join(root, "f")); n != 0 {
		t.Fatalf("%d descriptors open after close", n)
	}
}
