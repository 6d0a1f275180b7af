package server

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestCreateAttributes: what CREATE and MKDIR make, as uid 0 and as
// another user, under a process umask of 022 that the server must not
// apply: the mode asked for (set-ID and sticky bits too), the caller's
// owner and group; the reply's attributes are the new object's on disk,
// and the directory's wcc_data are its attributes before and after.
func TestCreateAttributes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	root, exps := layout(t)
	must(t, os.Chmod(filepath.Join(root, "exp"), 0o777))
	env := startServer(t, root, exps)
	rootFH, _ := mnt(t, env.client(t, true, 0, 0), "/exp")
	dir := filepath.Join(root, "exp")

	type op struct {
		name  string
		isDir bool
		how   nfs3.CreateHow // CREATE
		mode  uint32         // MKDIR
		want  uint32         // mode on disk
		size  int64
	}
	unchecked := func(m uint32) nfs3.CreateHow { return nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: sattrMode(m)} }
	ops := []op{
		{name: "f644", how: unchecked(0o644), want: 0o644},
		{name: "f666", how: unchecked(0o666), want: 0o666},
		{name: "f777", how: unchecked(0o777), want: 0o777},
		{name: "f4755", how: unchecked(0o4755), want: 0o4755},
		{name: "f2755", how: unchecked(0o2755), want: 0o2755},
		{name: "fnomode", how: nfs3.CreateHow{Mode: nfs3.Unchecked}, want: 0},
		{name: "fguarded", how: nfs3.CreateHow{Mode: nfs3.Guarded, Attr: sattrMode(0o600)}, want: 0o600},
		{name: "fsize", how: nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o640, SetSize: true, Size: 100}}, want: 0o640, size: 100},
		{name: "fexcl", how: nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: nfs3.CreateVerf{1, 2, 3, 4, 5, 6, 7, 8}}, want: 0},
		{name: "d755", isDir: true, mode: 0o755, want: 0o755},
		{name: "d777", isDir: true, mode: 0o777, want: 0o777},
		{name: "d1777", isDir: true, mode: 0o1777, want: 0o1777},
	}
	lstat := func(p string) unix.Stat_t {
		t.Helper()
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		return st
	}
	for _, id := range []uint32{0, 1000} {
		n := nfsc{t, env.client(t, false, id, id)}
		for _, o := range ops {
			name := o.name + "-" + strconv.Itoa(int(id))
			pre := lstat(dir)
			var r nfs3.CreateRes
			if o.isDir {
				r = n.mkdir(rootFH, name, o.mode)
			} else {
				r = n.create(rootFH, name, o.how)
			}
			wantStatus(t, name, r.Status, nfs3.OK)
			post := lstat(dir)
			st := lstat(filepath.Join(dir, name))
			if st.Mode&0o7777 != o.want || st.Uid != id || st.Gid != id || (!o.isDir && st.Size != o.size) {
				t.Errorf("uid %d %s: mode %o uid %d gid %d size %d, want %o, %d, %d, %d", id, name, st.Mode&0o7777, st.Uid, st.Gid, st.Size, o.want, id, id, o.size)
			}
			if !r.ObjAttr.Set || r.ObjAttr.Attr != fattr(&st) {
				t.Errorf("uid %d %s: reply attributes %+v, on disk %+v", id, name, r.ObjAttr, fattr(&st))
			}
			if r.DirWcc.Before != wccAttr(&pre) || !r.DirWcc.After.Set || r.DirWcc.After.Attr != fattr(&post) {
				t.Errorf("uid %d %s: directory wcc %+v, want before %+v after %+v", id, name, r.DirWcc, wccAttr(&pre), fattr(&post))
			}
			if o.how.Mode == nfs3.Exclusive {
				at, mt := exclVerf(o.how.Verf)
				if st.Atim.Sec != at || st.Mtim.Sec != mt {
					t.Errorf("uid %d %s: times %d %d, want the verifier's %d %d", id, name, st.Atim.Sec, st.Mtim.Sec, at, mt)
				}
				again := n.create(rootFH, name, o.how)
				if again.Status != nfs3.OK || again.Obj.FH != r.Obj.FH {
					t.Errorf("uid %d %s: retransmitted EXCLUSIVE CREATE: %v", id, name, again.Status)
				}
			}
		}
	}
}

// TestRemoveStatuses: REMOVE of another user's entry in a sticky
// directory is NFS3ERR_PERM, of a directory NFS3ERR_ISDIR, of a missing
// name NFS3ERR_NOENT; a removed file is gone, and the directory's
// wcc_data are its attributes before and after. RMDIR likewise, with
// NFS3ERR_NOTDIR for a file.
func TestRemoveStatuses(t *testing.T) {
	root, exps := layout(t)
	dir := filepath.Join(root, "exp")
	must(t, unix.Chmod(dir, 0o1777))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "mine"), nil, 0o644))
	must(t, os.Chown(filepath.Join(dir, "mine"), 1000, 1000))
	must(t, os.WriteFile(filepath.Join(dir, "theirs"), nil, 0o666))
	must(t, os.Chown(filepath.Join(dir, "theirs"), 2000, 2000))
	env := startServer(t, root, exps)
	rootFH, _ := mnt(t, env.client(t, true, 0, 0), "/exp")
	n := nfsc{t, env.client(t, false, 1000, 1000)}
	remove := func(name string) nfs3.RemoveRes {
		t.Helper()
		var r nfs3.RemoveRes
		n.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: name}}, &r)
		return r
	}
	wantStatus(t, "REMOVE of another's file in a sticky directory", remove("theirs").Status, nfs3.ErrPerm)
	wantStatus(t, "REMOVE of another's directory in a sticky directory", remove("sub").Status, nfs3.ErrPerm)
	wantStatus(t, "REMOVE of a missing name in a sticky directory", remove("none").Status, nfs3.ErrNoEnt)
	must(t, unix.Chmod(dir, 0o777))
	wantStatus(t, "REMOVE of a directory", remove("sub").Status, nfs3.ErrIsDir)
	wantStatus(t, "REMOVE of a missing name", remove("none").Status, nfs3.ErrNoEnt)
	var pre, post unix.Stat_t
	must(t, unix.Lstat(dir, &pre))
	r := remove("mine")
	must(t, unix.Lstat(dir, &post))
	wantStatus(t, "REMOVE", r.Status, nfs3.OK)
	if r.DirWcc.Before != wccAttr(&pre) || !r.DirWcc.After.Set || r.DirWcc.After.Attr != fattr(&post) {
		t.Errorf("directory wcc %+v, want before %+v after %+v", r.DirWcc, wccAttr(&pre), fattr(&post))
	}
	if _, err := os.Lstat(filepath.Join(dir, "mine")); !os.IsNotExist(err) {
		t.Errorf("removed file: %v", err)
	}
	wantStatus(t, "REMOVE of another's file (not sticky)", remove("theirs").Status, nfs3.OK)

	rmdir := func(name string) nfs3.RemoveRes {
		t.Helper()
		var r nfs3.RemoveRes
		n.do(nfs3.ProcRmdir, &nfs3.RmdirArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: name}}, &r)
		return r
	}
	must(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	must(t, unix.Chmod(dir, 0o1777))
	wantStatus(t, "RMDIR of another's directory in a sticky directory", rmdir("sub").Status, nfs3.ErrPerm)
	must(t, unix.Chmod(dir, 0o777))
	wantStatus(t, "RMDIR of a file", rmdir("file").Status, nfs3.ErrNotDir)
	wantStatus(t, "RMDIR of a missing name", rmdir("none").Status, nfs3.ErrNoEnt)
	must(t, unix.Lstat(dir, &pre))
	r = rmdir("sub")
	must(t, unix.Lstat(dir, &post))
	wantStatus(t, "RMDIR", r.Status, nfs3.OK)
	if r.DirWcc.Before != wccAttr(&pre) || !r.DirWcc.After.Set || r.DirWcc.After.Attr != fattr(&post) {
		t.Errorf("RMDIR: directory wcc %+v, want before %+v after %+v", r.DirWcc, wccAttr(&pre), fattr(&post))
	}
}

// TestVolumeWcc: in a volume export (whose directory changes are charged
// from a stat after them) CREATE, MKDIR, REMOVE and RMDIR answer the
// directory's attributes before and after.
func TestVolumeWcc(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "vol"), 0o755))
	e := startVolume(t, root, state, false, 1<<30, "n")
	dirFH, ms := mnt(t, e.rpcClient(t, true), "/vol")
	if ms != mount3.OK {
		t.Fatalf("MNT /vol: %v", ms)
	}
	n := nfsc{t, e.rpcClient(t, false)}
	dir := filepath.Join(root, "vol")
	check := func(what string, st nfs3.Status, w nfs3.WccData, pre unix.Stat_t) {
		t.Helper()
		wantStatus(t, what, st, nfs3.OK)
		var post unix.Stat_t
		must(t, unix.Lstat(dir, &post))
		if w.Before != wccAttr(&pre) || !w.After.Set || w.After.Attr != fattr(&post) {
			t.Errorf("%s: directory wcc %+v, want before %+v after %+v", what, w, wccAttr(&pre), fattr(&post))
		}
	}
	var pre unix.Stat_t
	remove := func(proc uint32, name string) nfs3.RemoveRes {
		var r nfs3.RemoveRes
		n.do(proc, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: dirFH, Name: name}}, &r)
		return r
	}
	must(t, unix.Lstat(dir, &pre))
	c := n.create(dirFH, "f", nfs3.CreateHow{Attr: sattrMode(0o644)})
	check("CREATE", c.Status, c.DirWcc, pre)
	must(t, unix.Lstat(dir, &pre))
	m := n.mkdir(dirFH, "d", 0o755)
	check("MKDIR", m.Status, m.DirWcc, pre)
	must(t, unix.Lstat(dir, &pre))
	r := remove(nfs3.ProcRemove, "f")
	check("REMOVE", r.Status, r.DirWcc, pre)
	must(t, unix.Lstat(dir, &pre))
	r = remove(nfs3.ProcRmdir, "d")
	check("RMDIR", r.Status, r.DirWcc, pre)
	checkUsage(t, e, "vol")
}
