package server

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestSetGIDDirectory: in a set-group-ID directory (what kubelet makes of
// a volume's root for a pod's fsGroup), a new file and a new directory
// take the directory's group, and the new directory is set-group-ID as
// well, whatever mode MKDIR asks for, so that files made in it take the
// group too (Linux's rule; Kubernetes' fsGroup specs check it).
func TestSetGIDDirectory(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	mc := env.client(t, true, 0, 0)
	n := nfsc{t, env.client(t, false, 0, 0)}
	rootFH, ms := mnt(t, mc, "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}
	d := n.mkdir(rootFH, "vol", 0o777)
	wantStatus(t, "MKDIR vol", d.Status, nfs3.OK)
	vol := filepath.Join(root, "exp", "vol")
	must(t, os.Lchown(vol, 0, 1000))
	must(t, syscall.Chmod(vol, 0o2775))
	stat := func(p string) syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		must(t, syscall.Lstat(p, &st))
		return st
	}

	f := n.create(d.Obj.FH, "file1", nfs3.CreateHow{Attr: sattrMode(0o644)})
	wantStatus(t, "CREATE file1", f.Status, nfs3.OK)
	if st := stat(filepath.Join(vol, "file1")); st.Gid != 1000 {
		t.Errorf("file1 group %d, want the directory's 1000", st.Gid)
	}
	sub := n.mkdir(d.Obj.FH, "subdir", 0o755)
	wantStatus(t, "MKDIR subdir", sub.Status, nfs3.OK)
	if st := stat(filepath.Join(vol, "subdir")); st.Gid != 1000 || st.Mode&0o7777 != 0o2755 {
		t.Errorf("subdir group %d mode %o, want 1000 and 2755", st.Gid, st.Mode&0o7777)
	}
	if sub.ObjAttr.Attr.Mode&0o7777 != 0o2755 {
		t.Errorf("MKDIR reply mode %o, want 2755", sub.ObjAttr.Attr.Mode&0o7777)
	}
	f2 := n.create(sub.Obj.FH, "file2", nfs3.CreateHow{Attr: sattrMode(0o644)})
	wantStatus(t, "CREATE subdir/file2", f2.Status, nfs3.OK)
	if st := stat(filepath.Join(vol, "subdir", "file2")); st.Gid != 1000 || st.Mode&0o7777 != 0o644 {
		t.Errorf("subdir/file2 group %d mode %o, want 1000 and 644", st.Gid, st.Mode&0o7777)
	}

	// outside a set-gid directory: the caller's group, the mode asked for
	plain := n.mkdir(rootFH, "plain", 0o755)
	wantStatus(t, "MKDIR plain", plain.Status, nfs3.OK)
	if st := stat(filepath.Join(root, "exp", "plain")); st.Gid != 0 || st.Mode&0o7777 != 0o755 {
		t.Errorf("plain group %d mode %o, want 0 and 755", st.Gid, st.Mode&0o7777)
	}
}
