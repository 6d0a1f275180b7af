package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// exportDirs returns the directories MOUNTPROC3_EXPORT lists.
func exportDirs(t *testing.T, e *volEnv) map[string][]string {
	t.Helper()
	var r mount3.ExportRes
	if err := rpc(t, e.rpcClient(t, true), mount3.Program, mount3.ProcExport, nil, &r); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, x := range r.Exports {
		out[x.Dir] = x.Groups
	}
	return out
}

// TestVolumeACL checks a volume export's client list: with no grant
// nobody may mount it or use a handle of it; a grant allows the next
// call, a revoke refuses the next call (MNT3ERR_ACCES, NFS3ERR_ACCES as
// knfsd); a read-only grant makes changes NFS3ERR_ROFS; the list survives
// a restart; an unregistered volume's handles are NFS3ERR_BADHANDLE.
func TestVolumeACL(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	testenv.MustWrite(t, filepath.Join(root, "vol", "file"), []byte("hello"))
	os.Chmod(filepath.Join(root, "vol", "file"), 0o666)
	e := startVolEnv(t, root, state, false, Export{Path: "/other"}.withDir(t, root))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := e.adm.PutVolume(ctx, "vol", 0); err != nil {
		t.Fatal(err)
	}
	mc := e.rpcClient(t, true)
	n := nfsc{t, e.rpcClient(t, false)}
	mntStatus := func(want mount3.Status) nfs3.FH {
		t.Helper()
		fh, s := mnt(t, mc, "/vol")
		if s != want {
			t.Fatalf("MNT /vol: %v, want %v", s, want)
		}
		return fh
	}
	mntStatus(mount3.ErrAccess)
	if _, listed := exportDirs(t, e)["/vol"]; listed {
		t.Fatal("a volume nobody may mount is listed by EXPORT")
	}
	if _, s := mnt(t, mc, "/other"); s != mount3.OK {
		t.Fatalf("a static export with an empty list: %v", s)
	}

	// another node's address does not let us in
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "other", Addrs: []string{"127.0.0.2"}}); err != nil {
		t.Fatal(err)
	}
	mntStatus(mount3.ErrAccess)
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "me", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if g := exportDirs(t, e)["/vol"]; len(g) != 2 {
		t.Fatalf("EXPORT groups of /vol: %v", g)
	}
	root1 := mntStatus(mount3.OK)
	file, s := n.lookup(root1, "file")
	wantStatus(t, "LOOKUP", s, nfs3.OK)
	if w := n.write(file, 0, []byte("HELLO"), nfs3.FileSync); w.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", w.Status)
	}

	// revoked: the handles we hold stop working at the next call
	if err := e.adm.Revoke(ctx, "vol", "me"); err != nil {
		t.Fatal(err)
	}
	_, s = n.getattr(root1)
	wantStatus(t, "GETATTR after revoke", s, nfs3.ErrAccess)
	_, s = n.getattr(file)
	wantStatus(t, "GETATTR of a file after revoke", s, nfs3.ErrAccess)
	if r := n.read(file, 0, 5); r.Status != nfs3.ErrAccess {
		t.Fatalf("READ after revoke: %v", r.Status)
	}
	mntStatus(mount3.ErrAccess)

	// read-only grant
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "me", Addrs: []string{"127.0.0.0/8"}, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if r := n.read(file, 0, 5); r.Status != nfs3.OK || string(r.Data) != "HELLO" {
		t.Fatalf("READ read-only: %v %q", r.Status, r.Data)
	}
	if w := n.write(file, 0, []byte("x"), nfs3.FileSync); w.Status != nfs3.ErrROFS {
		t.Fatalf("WRITE read-only: %v", w.Status)
	}
	if r := n.create(root1, "new", nfs3.CreateHow{Mode: nfs3.Unchecked}); r.Status != nfs3.ErrROFS {
		t.Fatalf("CREATE read-only: %v", r.Status)
	}
	// read-write again; the entry is replaced
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: "me", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if r := n.create(root1, "new", nfs3.CreateHow{Mode: nfs3.Unchecked}); r.Status != nfs3.OK {
		t.Fatalf("CREATE read-write: %v", r.Status)
	}

	// restart: the list is kept
	e.stop()
	e2 := startVolEnv(t, root, state, false, Export{Path: "/other"})
	mc = e2.rpcClient(t, true)
	n = nfsc{t, e2.rpcClient(t, false)}
	if _, s := mnt(t, mc, "/vol"); s != mount3.OK {
		t.Fatalf("MNT after restart: %v", s)
	}
	_, s = n.getattr(file)
	wantStatus(t, "GETATTR after restart", s, nfs3.OK)
	if err := e2.adm.Revoke(ctx, "vol", "me"); err != nil {
		t.Fatal(err)
	}
	_, s = n.getattr(file)
	wantStatus(t, "GETATTR after revoke", s, nfs3.ErrAccess)

	// unregistered: handles are unknown, the directory stays
	if err := e2.adm.Grant(ctx, "vol", admin.Access{Node: "me", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if err := e2.adm.DeleteVolume(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
	_, s = n.getattr(file)
	wantStatus(t, "GETATTR after DeleteVolume", s, nfs3.ErrBadHandle)
	if _, s := mnt(t, mc, "/vol"); s != mount3.ErrNoEnt {
		t.Fatalf("MNT after DeleteVolume: %v", s)
	}
	if _, err := os.Stat(filepath.Join(root, "vol", "file")); err != nil {
		t.Fatal(err)
	}
}

// withDir creates e's directory under root and returns e.
func (e Export) withDir(t *testing.T, root string) Export {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, e.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}
