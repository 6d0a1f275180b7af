package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// layout creates root/exp (rw export), root/ro (ro export, with file
// "file") and root/outside/secret.txt (not exported).
func layout(t *testing.T) (string, []Export) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	testenv.MustWrite(t, filepath.Join(root, "outside", "secret.txt"), []byte("secret"))
	testenv.MustWrite(t, filepath.Join(root, "ro", "file"), []byte("read only"))
	if err := os.Mkdir(filepath.Join(root, "exp"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, []Export{{Path: "/exp"}, {Path: "/ro", ReadOnly: true}}
}

func sattrMode(m uint32) nfs3.Sattr { return nfs3.Sattr{SetMode: true, Mode: m} }

func TestProtocol(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	mc := env.client(t, true, 0, 0)
	n := nfsc{t, env.client(t, false, 0, 0)}
	user := nfsc{t, env.client(t, false, 1000, 1000)}

	rootFH, ms := mnt(t, mc, "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}

	t.Run("mount", func(t *testing.T) {
		if err := mc.Null(testenv.Context(t, 30*time.Second), mount3.Program, mount3.Version); err != nil {
			t.Fatal(err)
		}
		if _, s := mnt(t, mc, "/nope"); s != mount3.ErrNoEnt {
			t.Fatalf("MNT /nope: %v", s)
		}
		if _, s := mnt(t, mc, "/outside"); s != mount3.ErrNoEnt {
			t.Fatalf("MNT /outside: %v", s)
		}
		os.MkdirAll(filepath.Join(root, "exp", "sub", "dir"), 0o755)
		os.Symlink("../../outside", filepath.Join(root, "exp", "sub", "esc"))
		sub, s := mnt(t, mc, "/exp/sub/dir")
		if s != mount3.OK {
			t.Fatalf("MNT /exp/sub/dir: %v", s)
		}
		if a, st := n.getattr(sub); st != nfs3.OK || a.Type != nfs3.TypeDir {
			t.Fatalf("GETATTR of a mounted subdirectory: %v", st)
		}
		if _, s := mnt(t, mc, "/exp/sub/esc"); s == mount3.OK {
			t.Fatal("MNT through a symlink out of the export succeeded")
		}
		if _, s := mnt(t, mc, "/exp/../outside"); s == mount3.OK {
			t.Fatal("MNT /exp/../outside succeeded")
		}
		var ex mount3.ExportRes
		if err := rpc(t, mc, mount3.Program, mount3.ProcExport, nil, &ex); err != nil {
			t.Fatal(err)
		}
		if len(ex.Exports) != 2 || ex.Exports[0].Dir != "/exp" || ex.Exports[1].Dir != "/ro" {
			t.Fatalf("EXPORT: %+v", ex.Exports)
		}
		var dump mount3.DumpRes
		if err := rpc(t, mc, mount3.Program, mount3.ProcDump, nil, &dump); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(dump.Mounts, mount3.MountEntry{Hostname: "127.0.0.1", Directory: "/exp"}) {
			t.Fatalf("DUMP: %+v", dump.Mounts)
		}
		if err := rpc(t, mc, mount3.Program, mount3.ProcUmnt, &mount3.UmntArgs{Path: "/exp"}, nil); err != nil {
			t.Fatal(err)
		}
		if err := rpc(t, mc, mount3.Program, mount3.ProcUmntAll, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := rpc(t, mc, mount3.Program, mount3.ProcDump, nil, &dump); err != nil || len(dump.Mounts) != 0 {
			t.Fatalf("DUMP after UMNT: %+v %v", dump.Mounts, err)
		}
	})

	t.Run("null-getattr", func(t *testing.T) {
		if err := n.c.Null(testenv.Context(t, 30*time.Second), nfs3.Program, nfs3.Version); err != nil {
			t.Fatal(err)
		}
		a, s := n.getattr(rootFH)
		wantStatus(t, "GETATTR", s, nfs3.OK)
		if a.Type != nfs3.TypeDir {
			t.Fatalf("root type %v", a.Type)
		}
	})

	var fileFH nfs3.FH
	t.Run("create-write-read-commit", func(t *testing.T) {
		r := n.create(rootFH, "f", nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: sattrMode(0o644)})
		wantStatus(t, "CREATE", r.Status, nfs3.OK)
		if !r.Obj.Set || !r.ObjAttr.Set || r.ObjAttr.Attr.Mode != 0o644 || !r.DirWcc.Before.Set || !r.DirWcc.After.Set {
			t.Fatalf("CREATE result %+v", r)
		}
		fileFH = r.Obj.FH
		w := n.write(fileFH, 0, []byte("hello world"), nfs3.FileSync)
		wantStatus(t, "WRITE", w.Status, nfs3.OK)
		if w.Count != 11 || w.Committed != nfs3.FileSync || w.Verf != env.srv.WriteVerf() || w.Wcc.Before.Attr.Size != 0 || w.Wcc.After.Attr.Size != 11 {
			t.Fatalf("WRITE result %+v", w)
		}
		w = n.write(fileFH, 11, []byte("!"), nfs3.Unstable)
		wantStatus(t, "WRITE unstable", w.Status, nfs3.OK)
		if w.Committed != nfs3.Unstable {
			t.Fatalf("committed %v", w.Committed)
		}
		rd := n.read(fileFH, 0, 100)
		wantStatus(t, "READ", rd.Status, nfs3.OK)
		if string(rd.Data) != "hello world!" || !rd.EOF {
			t.Fatalf("READ %q eof %v", rd.Data, rd.EOF)
		}
		rd = n.read(fileFH, 6, 5)
		if string(rd.Data) != "world" || rd.EOF {
			t.Fatalf("READ mid %q eof %v", rd.Data, rd.EOF)
		}
		rd = n.read(fileFH, 100, 5)
		if len(rd.Data) != 0 || !rd.EOF {
			t.Fatalf("READ past end %q eof %v", rd.Data, rd.EOF)
		}
		var c nfs3.CommitRes
		n.do(nfs3.ProcCommit, &nfs3.CommitArgs{File: fileFH}, &c)
		wantStatus(t, "COMMIT", c.Status, nfs3.OK)
		if c.Verf != env.srv.WriteVerf() {
			t.Fatal("COMMIT verifier")
		}
		if r := n.read(rootFH, 0, 10); r.Status != nfs3.ErrIsDir {
			t.Fatalf("READ dir: %v", r.Status)
		}
		if r := n.write(rootFH, 0, []byte("x"), nfs3.Unstable); r.Status != nfs3.ErrIsDir {
			t.Fatalf("WRITE dir: %v", r.Status)
		}
		if r := n.create(rootFH, "f", nfs3.CreateHow{Mode: nfs3.Guarded}); r.Status != nfs3.ErrExist {
			t.Fatalf("GUARDED existing: %v", r.Status)
		}
		if r := n.create(rootFH, "f", nfs3.CreateHow{Mode: nfs3.Unchecked}); r.Status != nfs3.OK || r.Obj.FH != fileFH {
			t.Fatalf("UNCHECKED existing: %v", r.Status)
		}
		if got, err := os.ReadFile(filepath.Join(root, "exp", "f")); err != nil || string(got) != "hello world!" {
			t.Fatalf("file on disk %q %v", got, err)
		}
	})

	t.Run("setattr-guard", func(t *testing.T) {
		a, _ := n.getattr(fileFH)
		var r nfs3.SetattrRes
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fileFH, Attr: nfs3.Sattr{SetSize: true, Size: 5},
			Guard: nfs3.SattrGuard{Check: true, Ctime: nfs3.Time{Seconds: a.Ctime.Seconds - 10}}}, &r)
		wantStatus(t, "SETATTR bad guard", r.Status, nfs3.ErrNotSync)
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fileFH, Attr: nfs3.Sattr{SetSize: true, Size: 5, SetMode: true, Mode: 0o640,
			Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: 1000000}}},
			Guard: nfs3.SattrGuard{Check: true, Ctime: a.Ctime}}, &r)
		wantStatus(t, "SETATTR", r.Status, nfs3.OK)
		if !r.Wcc.Before.Set || r.Wcc.Before.Attr.Size != 12 || r.Wcc.After.Attr.Size != 5 || r.Wcc.After.Attr.Mode != 0o640 || r.Wcc.After.Attr.Mtime.Seconds != 1000000 {
			t.Fatalf("SETATTR wcc %+v", r.Wcc)
		}
	})

	t.Run("lookup", func(t *testing.T) {
		fh, s := n.lookup(rootFH, "f")
		wantStatus(t, "LOOKUP", s, nfs3.OK)
		if fh != fileFH {
			t.Fatal("LOOKUP handle differs from CREATE's")
		}
		_, s = n.lookup(rootFH, "missing")
		wantStatus(t, "LOOKUP missing", s, nfs3.ErrNoEnt)
		_, s = n.lookup(fileFH, "x")
		wantStatus(t, "LOOKUP in file", s, nfs3.ErrNotDir)
		up, s := n.lookup(rootFH, "..")
		wantStatus(t, "LOOKUP ..", s, nfs3.OK)
		if up != rootFH {
			t.Fatal("LOOKUP .. at the export root left the root")
		}
	})

	t.Run("exclusive", func(t *testing.T) {
		how := nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: nfs3.CreateVerf{1, 2, 3, 4, 5, 6, 7, 8}}
		r1 := n.create(rootFH, "excl", how)
		wantStatus(t, "CREATE EXCLUSIVE", r1.Status, nfs3.OK)
		r2 := n.create(rootFH, "excl", how)
		wantStatus(t, "CREATE EXCLUSIVE retransmitted", r2.Status, nfs3.OK)
		if r1.Obj.FH != r2.Obj.FH {
			t.Fatal("retransmission returned another handle")
		}
		how.Verf[7]++
		wantStatus(t, "CREATE EXCLUSIVE other verifier", n.create(rootFH, "excl", how).Status, nfs3.ErrExist)
		wantStatus(t, "CREATE EXCLUSIVE on f", n.create(rootFH, "f", how).Status, nfs3.ErrExist)
	})

	t.Run("dirs", func(t *testing.T) {
		d := n.mkdir(rootFH, "d", 0o755)
		wantStatus(t, "MKDIR", d.Status, nfs3.OK)
		if d.ObjAttr.Attr.Type != nfs3.TypeDir || d.ObjAttr.Attr.Mode != 0o755 {
			t.Fatalf("MKDIR attrs %+v", d.ObjAttr.Attr)
		}
		wantStatus(t, "MKDIR again", n.mkdir(rootFH, "d", 0o755).Status, nfs3.ErrExist)
		wantStatus(t, "CREATE in d", n.create(d.Obj.FH, "x", nfs3.CreateHow{}).Status, nfs3.OK)
		var rr nfs3.RemoveRes
		n.do(nfs3.ProcRmdir, &nfs3.RmdirArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: "d"}}, &rr)
		wantStatus(t, "RMDIR non-empty", rr.Status, nfs3.ErrNotEmpty)
		n.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: "d"}}, &rr)
		wantStatus(t, "REMOVE dir", rr.Status, nfs3.ErrIsDir)
		n.do(nfs3.ProcRmdir, &nfs3.RmdirArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: "f"}}, &rr)
		wantStatus(t, "RMDIR file", rr.Status, nfs3.ErrNotDir)
		n.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: d.Obj.FH, Name: "x"}}, &rr)
		wantStatus(t, "REMOVE", rr.Status, nfs3.OK)
		if !rr.DirWcc.Before.Set || !rr.DirWcc.After.Set {
			t.Fatal("REMOVE without wcc")
		}
		n.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: d.Obj.FH, Name: "x"}}, &rr)
		wantStatus(t, "REMOVE missing", rr.Status, nfs3.ErrNoEnt)
		n.do(nfs3.ProcRmdir, &nfs3.RmdirArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: "d"}}, &rr)
		wantStatus(t, "RMDIR", rr.Status, nfs3.OK)
	})

	t.Run("symlink-escape", func(t *testing.T) {
		target := "../outside"
		var r nfs3.CreateRes
		n.do(nfs3.ProcSymlink, inline{&nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: rootFH, Name: "ln"}, Path: []byte(target)}}, &r)
		wantStatus(t, "SYMLINK", r.Status, nfs3.OK)
		if r.ObjAttr.Attr.Type != nfs3.TypeLnk || r.ObjAttr.Attr.UID != 0 {
			t.Fatalf("SYMLINK attrs %+v", r.ObjAttr.Attr)
		}
		var rl nfs3.ReadlinkRes
		n.do(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: r.Obj.FH}, ddpRes{&rl})
		wantStatus(t, "READLINK", rl.Status, nfs3.OK)
		if string(rl.Path) != target {
			t.Fatalf("READLINK %q", rl.Path)
		}
		n.do(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: fileFH}, ddpRes{&rl})
		wantStatus(t, "READLINK file", rl.Status, nfs3.ErrInval)
		fh, s := n.lookup(rootFH, "ln")
		wantStatus(t, "LOOKUP ln", s, nfs3.OK)
		if a, _ := n.getattr(fh); a.Type != nfs3.TypeLnk {
			t.Fatalf("LOOKUP followed the symlink: %v", a.Type)
		}
		_, s = n.lookup(fh, "secret.txt")
		wantStatus(t, "LOOKUP through symlink", s, nfs3.ErrNotDir)
		wantStatus(t, "CREATE through symlink", n.create(fh, "x", nfs3.CreateHow{}).Status, nfs3.ErrNotDir)
		// a symlink to a file outside: CREATE UNCHECKED on it must not write through it
		os.Symlink("../outside/secret.txt", filepath.Join(root, "exp", "ln2"))
		wantStatus(t, "CREATE over symlink", n.create(rootFH, "ln2", nfs3.CreateHow{Attr: nfs3.Sattr{SetSize: true}}).Status, nfs3.ErrExist)
		fh2, _ := n.lookup(rootFH, "ln2")
		wantStatus(t, "WRITE symlink", n.write(fh2, 0, []byte("x"), nfs3.FileSync).Status, nfs3.ErrInval)
		wantStatus(t, "READ symlink", n.read(fh2, 0, 10).Status, nfs3.ErrInval)
		up, _ := n.lookup(rootFH, "..")
		up2, _ := n.lookup(up, "..")
		if up2 != rootFH {
			t.Fatal("LOOKUP ../.. left the export")
		}
		_, s = n.lookup(rootFH, "../outside")
		wantStatus(t, "LOOKUP with slash", s, nfs3.ErrNoEnt)
		if got, _ := os.ReadFile(filepath.Join(root, "outside", "secret.txt")); string(got) != "secret" {
			t.Fatalf("outside file changed: %q", got)
		}
	})

	t.Run("mknod-link-rename", func(t *testing.T) {
		var r nfs3.CreateRes
		n.do(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: rootFH, Name: "fifo"}, Type: nfs3.TypeFIFO, Attr: sattrMode(0o600)}, &r)
		wantStatus(t, "MKNOD fifo", r.Status, nfs3.OK)
		if r.ObjAttr.Attr.Type != nfs3.TypeFIFO {
			t.Fatalf("MKNOD type %v", r.ObjAttr.Attr.Type)
		}
		user.do(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: rootFH, Name: "chr"}, Type: nfs3.TypeChr}, &r)
		if r.Status != nfs3.ErrPerm && r.Status != nfs3.ErrAccess {
			t.Fatalf("MKNOD chr as user: %v", r.Status)
		}
		var l nfs3.LinkRes
		n.do(nfs3.ProcLink, &nfs3.LinkArgs{File: fileFH, Link: nfs3.DirOpArgs{Dir: rootFH, Name: "f2"}}, &l)
		wantStatus(t, "LINK", l.Status, nfs3.OK)
		if l.FileAttr.Attr.Nlink != 2 || !l.LinkDirWcc.After.Set {
			t.Fatalf("LINK result %+v", l)
		}
		n.do(nfs3.ProcLink, &nfs3.LinkArgs{File: fileFH, Link: nfs3.DirOpArgs{Dir: rootFH, Name: "f2"}}, &l)
		wantStatus(t, "LINK existing", l.Status, nfs3.ErrExist)
		var rn nfs3.RenameRes
		n.do(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: rootFH, Name: "f2"}, To: nfs3.DirOpArgs{Dir: rootFH, Name: "f3"}}, &rn)
		wantStatus(t, "RENAME", rn.Status, nfs3.OK)
		if !rn.FromDirWcc.Before.Set || !rn.ToDirWcc.After.Set {
			t.Fatal("RENAME wcc")
		}
		_, s := n.lookup(rootFH, "f2")
		wantStatus(t, "LOOKUP renamed", s, nfs3.ErrNoEnt)
		fh, s := n.lookup(rootFH, "f3")
		wantStatus(t, "LOOKUP new name", s, nfs3.OK)
		if fh != fileFH {
			t.Fatal("hard link has another handle")
		}
		n.do(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: rootFH, Name: "nope"}, To: nfs3.DirOpArgs{Dir: rootFH, Name: "x"}}, &rn)
		wantStatus(t, "RENAME missing", rn.Status, nfs3.ErrNoEnt)
	})

	t.Run("readdir", func(t *testing.T) {
		d := n.mkdir(rootFH, "many", 0o755)
		want := []string{".", ".."}
		for i := range 60 {
			name := fmt.Sprintf("entry-%03d-%s", i, string(bytes.Repeat([]byte{'x'}, i)))
			wantStatus(t, "CREATE", n.create(d.Obj.FH, name, nfs3.CreateHow{}).Status, nfs3.OK)
			want = append(want, name)
		}
		var got []string
		var cookie uint64
		var verf nfs3.CookieVerf
		for pages := 0; ; pages++ {
			var r nfs3.ReaddirRes
			n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Cookie: cookie, Verf: verf, Count: 1024}, &r)
			wantStatus(t, "READDIR", r.Status, nfs3.OK)
			if r.ResOKSize() > 1024 {
				t.Fatalf("READDIR reply of %d bytes > count", r.ResOKSize())
			}
			for _, e := range r.Entries {
				got = append(got, e.Name)
				cookie = e.Cookie
			}
			verf = r.Verf
			if r.EOF {
				if pages < 2 {
					t.Fatalf("READDIR took %d pages", pages+1)
				}
				break
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("READDIR names: got %d, want %d", len(got), len(want))
		}
		// same cookie, same entries (offset cookies are stable)
		var a, b nfs3.ReaddirRes
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Count: 600}, &a)
		c := a.Entries[len(a.Entries)-1].Cookie
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Cookie: c, Verf: a.Verf, Count: 600}, &a)
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Cookie: c, Verf: a.Verf, Count: 600}, &b)
		if len(a.Entries) == 0 || a.Entries[0].Name != b.Entries[0].Name {
			t.Fatal("READDIR from the same cookie differs")
		}
		bad := a.Verf
		bad[0] ^= 0xff
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Cookie: c, Verf: bad, Count: 600}, &b)
		wantStatus(t, "READDIR bad verifier", b.Status, nfs3.ErrBadCookie)
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: d.Obj.FH, Count: 20}, &b)
		wantStatus(t, "READDIR tiny count", b.Status, nfs3.ErrTooSmall)
		n.do(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: fileFH, Count: 600}, &b)
		wantStatus(t, "READDIR file", b.Status, nfs3.ErrNotDir)

		var p nfs3.ReaddirplusRes
		n.do(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: d.Obj.FH, DirCount: 512, MaxCount: 4096}, &p)
		wantStatus(t, "READDIRPLUS", p.Status, nfs3.OK)
		if p.ResOKSize() > 4096 || p.EOF || len(p.Entries) < 3 {
			t.Fatalf("READDIRPLUS: %d entries, %d bytes, eof %v", len(p.Entries), p.ResOKSize(), p.EOF)
		}
		for _, e := range p.Entries {
			if !e.Attr.Set || !e.Handle.Set {
				t.Fatalf("READDIRPLUS entry %q without attrs/handle", e.Name)
			}
			if e.Name == ".." {
				continue
			}
			if a, s := n.getattr(e.Handle.FH); s != nfs3.OK || a.FileID != e.Attr.Attr.FileID {
				t.Fatalf("READDIRPLUS handle of %q: %v", e.Name, s)
			}
		}
		var rp nfs3.ReaddirplusRes
		n.do(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: rootFH, MaxCount: 8192}, &rp)
		for _, e := range rp.Entries {
			if e.Name == ".." && e.Handle.FH != rootFH {
				t.Fatal("READDIRPLUS .. at the export root is not the root")
			}
		}
	})

	t.Run("fs-info", func(t *testing.T) {
		var s nfs3.FsstatRes
		n.do(nfs3.ProcFsstat, &nfs3.FsstatArgs{FSRoot: rootFH}, &s)
		wantStatus(t, "FSSTAT", s.Status, nfs3.OK)
		if s.TBytes == 0 || s.TBytes < s.FBytes {
			t.Fatalf("FSSTAT %+v", s)
		}
		var i nfs3.FsinfoRes
		n.do(nfs3.ProcFsinfo, &nfs3.FsinfoArgs{FSRoot: rootFH}, &i)
		wantStatus(t, "FSINFO", i.Status, nfs3.OK)
		if i.RTMax != 1<<20 || i.WTMax != 1<<20 {
			t.Fatalf("FSINFO %+v", i)
		}
		var p nfs3.PathconfRes
		n.do(nfs3.ProcPathconf, &nfs3.PathconfArgs{Object: rootFH}, &p)
		wantStatus(t, "PATHCONF", p.Status, nfs3.OK)
		if p.NameMax != 255 {
			t.Fatalf("PATHCONF %+v", p)
		}
	})

	t.Run("access-non-root", func(t *testing.T) {
		secret := n.create(rootFH, "private", nfs3.CreateHow{Attr: sattrMode(0o600)})
		wantStatus(t, "CREATE private", secret.Status, nfs3.OK)
		var a nfs3.AccessRes
		all := uint32(0x3f)
		n.do(nfs3.ProcAccess, &nfs3.AccessArgs{Object: secret.Obj.FH, Access: all}, &a)
		if a.Access != nfs3.AccessRead|nfs3.AccessModify|nfs3.AccessExtend {
			t.Fatalf("ACCESS root on 0600: %#x", a.Access)
		}
		user.do(nfs3.ProcAccess, &nfs3.AccessArgs{Object: secret.Obj.FH, Access: all}, &a)
		if a.Status != nfs3.OK || a.Access != 0 {
			t.Fatalf("ACCESS user on 0600 root file: %v %#x", a.Status, a.Access)
		}
		user.do(nfs3.ProcAccess, &nfs3.AccessArgs{Object: rootFH, Access: all}, &a)
		if a.Access != nfs3.AccessRead|nfs3.AccessLookup {
			t.Fatalf("ACCESS user on 0755 root dir: %#x", a.Access)
		}
		wantStatus(t, "READ as user", user.read(secret.Obj.FH, 0, 10).Status, nfs3.ErrAccess)
		wantStatus(t, "WRITE as user", user.write(secret.Obj.FH, 0, []byte("x"), nfs3.Unstable).Status, nfs3.ErrAccess)
		wantStatus(t, "CREATE as user", user.create(rootFH, "u", nfs3.CreateHow{}).Status, nfs3.ErrAccess)
		var sr nfs3.SetattrRes
		user.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: secret.Obj.FH, Attr: sattrMode(0o666)}, &sr)
		wantStatus(t, "SETATTR mode as user", sr.Status, nfs3.ErrPerm)
		// a directory the user owns: objects created there are the user's
		ud := n.mkdir(rootFH, "userdir", 0o755)
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: ud.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}}, &sr)
		wantStatus(t, "SETATTR chown", sr.Status, nfs3.OK)
		c := user.create(ud.Obj.FH, "mine", nfs3.CreateHow{Attr: sattrMode(0o600)})
		wantStatus(t, "CREATE as user in own dir", c.Status, nfs3.OK)
		if c.ObjAttr.Attr.UID != 1000 || c.ObjAttr.Attr.GID != 1000 {
			t.Fatalf("created as %d:%d", c.ObjAttr.Attr.UID, c.ObjAttr.Attr.GID)
		}
		if fi, err := os.Lstat(filepath.Join(root, "exp", "userdir", "mine")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("on disk: %v %v", fi, err)
		}
		var sl nfs3.CreateRes
		user.do(nfs3.ProcSymlink, inline{&nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: ud.Obj.FH, Name: "l"}, Path: []byte("mine")}}, &sl)
		wantStatus(t, "SYMLINK as user", sl.Status, nfs3.OK)
		if sl.ObjAttr.Attr.UID != 1000 {
			t.Fatalf("symlink owned by %d", sl.ObjAttr.Attr.UID)
		}
		user.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 0}}, &sr)
		wantStatus(t, "SETATTR give away as user", sr.Status, nfs3.ErrPerm)
		var rr nfs3.RemoveRes
		user.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: rootFH, Name: "private"}}, &rr)
		wantStatus(t, "REMOVE as user in root's dir", rr.Status, nfs3.ErrAccess)
		private := n.mkdir(rootFH, "closed", 0o700)
		_, s := user.lookup(private.Obj.FH, "x")
		wantStatus(t, "LOOKUP as user in 0700 dir", s, nfs3.ErrAccess)
		// root squash: uid 0 becomes 65534
		sq := exps
		sq[0].RootSquash = true
		if err := env.srv.SetExports(sq); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "squashed root READ", n.read(secret.Obj.FH, 0, 10).Status, nfs3.ErrAccess)
		wantStatus(t, "squashed root CREATE in 0755 root dir", n.create(rootFH, "sq", nfs3.CreateHow{}).Status, nfs3.ErrAccess)
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: ud.Obj.FH, Attr: sattrMode(0o777)}, &sr)
		wantStatus(t, "squashed root chmod of another's dir", sr.Status, nfs3.ErrPerm)
		// group 0 among the supplementary groups is squashed too: a file
		// of uid 1000, group 0, mode 0060 is not readable by uid 5 in groups [0]
		sq[0].RootSquash = false
		if err := env.srv.SetExports(sq); err != nil {
			t.Fatal(err)
		}
		grp := n.create(rootFH, "group0", nfs3.CreateHow{Attr: sattrMode(0o060)})
		wantStatus(t, "CREATE group0", grp.Status, nfs3.OK)
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: grp.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 0}}, &sr)
		wantStatus(t, "chown group0", sr.Status, nfs3.OK)
		g0 := nfsc{t, env.client(t, false, 5, 5, 0)}
		wantStatus(t, "READ in group 0, no squash", g0.read(grp.Obj.FH, 0, 1).Status, nfs3.OK)
		sq[0].RootSquash = true
		if err := env.srv.SetExports(sq); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "READ in group 0, squashed", g0.read(grp.Obj.FH, 0, 1).Status, nfs3.ErrAccess)
		sq[0].RootSquash = false
		env.srv.SetExports(sq)
	})

	t.Run("rofs", func(t *testing.T) {
		roFH, ms := mnt(t, mc, "/ro")
		if ms != mount3.OK {
			t.Fatal(ms)
		}
		fh, s := n.lookup(roFH, "file")
		wantStatus(t, "LOOKUP ro", s, nfs3.OK)
		wantStatus(t, "READ ro", n.read(fh, 0, 9).Status, nfs3.OK)
		wantStatus(t, "WRITE ro", n.write(fh, 0, []byte("x"), nfs3.FileSync).Status, nfs3.ErrROFS)
		wantStatus(t, "CREATE ro", n.create(roFH, "new", nfs3.CreateHow{}).Status, nfs3.ErrROFS)
		wantStatus(t, "MKDIR ro", n.mkdir(roFH, "new", 0o755).Status, nfs3.ErrROFS)
		var sr nfs3.SetattrRes
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, Attr: sattrMode(0o600)}, &sr)
		wantStatus(t, "SETATTR ro", sr.Status, nfs3.ErrROFS)
		var rr nfs3.RemoveRes
		n.do(nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: roFH, Name: "file"}}, &rr)
		wantStatus(t, "REMOVE ro", rr.Status, nfs3.ErrROFS)
		var rn nfs3.RenameRes
		n.do(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: rootFH, Name: "f"}, To: nfs3.DirOpArgs{Dir: roFH, Name: "f"}}, &rn)
		wantStatus(t, "RENAME into ro", rn.Status, nfs3.ErrROFS)
	})

	t.Run("stale-badhandle", func(t *testing.T) {
		r := n.create(rootFH, "gone", nfs3.CreateHow{})
		os.Remove(filepath.Join(root, "exp", "gone"))
		_, s := n.getattr(r.Obj.FH)
		wantStatus(t, "GETATTR removed", s, nfs3.ErrStale)
		_, s = n.getattr(nfs3.MustFH([]byte("garbage")))
		wantStatus(t, "GETATTR garbage", s, nfs3.ErrBadHandle)
		b := rootFH.Bytes()
		b = append([]byte(nil), b...)
		b[1] ^= 0xff // unknown export id
		_, s = n.getattr(nfs3.MustFH(b))
		wantStatus(t, "GETATTR unknown export", s, nfs3.ErrBadHandle)
		_, s = n.getattr(nfs3.FH{})
		wantStatus(t, "GETATTR empty", s, nfs3.ErrBadHandle)
		// a handle of the /ro export relabelled as /exp (to pass /exp's
		// client list and rw) fails its MAC
		roFH, _ := mnt(t, mc, "/ro")
		rb := append([]byte(nil), roFH.Bytes()...)
		binary.BigEndian.PutUint32(rb[1:], ExportID("/exp"))
		_, s = n.getattr(nfs3.MustFH(rb))
		wantStatus(t, "GETATTR relabelled handle", s, nfs3.ErrBadHandle)
	})

	t.Run("garbage-args", func(t *testing.T) {
		for _, proc := range []uint32{nfs3.ProcGetattr, nfs3.ProcWrite, nfs3.ProcCreate, nfs3.ProcReaddir} {
			err := n.c.Call(testenv.Context(t, 30*time.Second), sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: proc,
				Args: func(b *sunrpc.Builder) { b.Uint32(64) }})
			if !errors.Is(err, sunrpc.ErrGarbageArgs) {
				t.Fatalf("%s truncated: %v", nfs3.ProcName(proc), err)
			}
		}
		err := mc.Call(testenv.Context(t, 30*time.Second), sunrpc.CallSpec{Prog: mount3.Program, Vers: 3, Proc: mount3.ProcMnt,
			Args: func(b *sunrpc.Builder) { b.Uint32(100) }})
		if !errors.Is(err, sunrpc.ErrGarbageArgs) {
			t.Fatalf("MNT truncated: %v", err)
		}
	})

	t.Run("client-acl-and-live-exports", func(t *testing.T) {
		os.Mkdir(filepath.Join(root, "vol2"), 0o755)
		if err := env.srv.SetExports([]Export{{Path: "/exp", Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, {Path: "/vol2"}}); err != nil {
			t.Fatal(err)
		}
		if _, s := mnt(t, mc, "/exp"); s != mount3.ErrAccess {
			t.Fatalf("MNT from outside the CIDRs: %v", s)
		}
		_, s := n.getattr(rootFH)
		wantStatus(t, "GETATTR from outside the CIDRs", s, nfs3.ErrAccess)
		if _, s := mnt(t, mc, "/vol2"); s != mount3.OK {
			t.Fatalf("MNT new export: %v", s)
		}
		if _, s := mnt(t, mc, "/ro"); s != mount3.ErrNoEnt {
			t.Fatalf("MNT removed export: %v", s)
		}
		if err := env.srv.SetExports([]Export{{Path: "/exp", Clients: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}); err != nil {
			t.Fatal(err)
		}
		_, s = n.getattr(rootFH)
		wantStatus(t, "GETATTR after re-allowing", s, nfs3.OK)
		if err := env.srv.SetExports([]Export{{Path: "/exp"}, {Path: "/vol2"}}); err != nil {
			t.Fatal(err)
		}
		vol2, _ := mnt(t, mc, "/vol2")
		var rn nfs3.RenameRes
		n.do(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: rootFH, Name: "f"}, To: nfs3.DirOpArgs{Dir: vol2, Name: "f"}}, &rn)
		wantStatus(t, "RENAME across exports", rn.Status, nfs3.ErrXDev)
		var l nfs3.LinkRes
		n.do(nfs3.ProcLink, &nfs3.LinkArgs{File: fileFH, Link: nfs3.DirOpArgs{Dir: vol2, Name: "f"}}, &l)
		wantStatus(t, "LINK across exports", l.Status, nfs3.ErrXDev)
		if err := env.srv.SetExports([]Export{{Path: "/outside/secret.txt"}}); err == nil {
			t.Fatal("exporting a file succeeded")
		}
		if err := env.srv.SetExports([]Export{{Path: "/exp/../../etc"}}); err == nil {
			t.Fatal("exporting outside the root succeeded")
		}
	})
}

// TestRestart checks that handles survive a restart on the same root and
// that the write verifier changes.
func TestRestart(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	n := nfsc{t, env.client(t, false, 0, 0)}
	rootFH, _ := mnt(t, env.client(t, true, 0, 0), "/exp")
	f := n.create(rootFH, "keep", nfs3.CreateHow{})
	d := n.mkdir(rootFH, "dir", 0o755)
	v1 := n.write(f.Obj.FH, 0, []byte("data"), nfs3.Unstable).Verf
	env.stop()

	env2 := startServer(t, root, exps)
	n2 := nfsc{t, env2.client(t, false, 0, 0)}
	for _, fh := range []nfs3.FH{rootFH, f.Obj.FH, d.Obj.FH} {
		if _, s := n2.getattr(fh); s != nfs3.OK {
			t.Fatalf("GETATTR after restart: %v", s)
		}
	}
	if r := n2.read(f.Obj.FH, 0, 10); string(r.Data) != "data" {
		t.Fatalf("READ after restart: %v %q", r.Status, r.Data)
	}
	v2 := n2.write(f.Obj.FH, 0, []byte("data"), nfs3.Unstable).Verf
	if v1 == v2 {
		t.Fatal("write verifier unchanged across a restart")
	}
}

func TestParseExport(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Export
		bad  bool
	}{
		{in: "/vol", bad: true},  // no clients
		{in: "/v:ro", bad: true}, // no clients
		{in: "vol/:*", want: Export{Path: "/vol", RootSquash: true}},
		{in: "/vol:10.0.0.0/8,127.0.0.1:ro", want: Export{Path: "/vol", ReadOnly: true, RootSquash: true, Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}}},
		{in: "/:*:rw,root_squash", want: Export{Path: "/", RootSquash: true}},
		{in: "/:10.1.2.3:rw,no_root_squash", want: Export{Path: "/", Clients: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}}},
		{in: "/v:notanip", bad: true},
		{in: "/v:*:ro", want: Export{Path: "/v", ReadOnly: true, RootSquash: true}},
		{in: "/v:fd00::/8,::1:ro", want: Export{Path: "/v", ReadOnly: true, RootSquash: true, Clients: []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128")}}},
		{in: "/v:fd00::1", want: Export{Path: "/v", RootSquash: true, Clients: []netip.Prefix{netip.MustParsePrefix("fd00::1/128")}}},
		{in: "", bad: true},
	} {
		got, err := ParseExport(tc.in)
		if (err != nil) != tc.bad {
			t.Fatalf("%q: err %v", tc.in, err)
		}
		if !tc.bad && (got.Path != tc.want.Path || got.ReadOnly != tc.want.ReadOnly || got.RootSquash != tc.want.RootSquash || !slices.Equal(got.Clients, tc.want.Clients)) {
			t.Fatalf("%q: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
