package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestWriteClearsSetID: a WRITE by a caller other than root clears the
// file's set-user-ID bit, and its set-group-ID bit when group execute is set
// or the caller is not in the file's group, as write(2) on a local file
// system does for a writer without CAP_FSETID; root's WRITE keeps them; an
// empty WRITE changes nothing. Checked on disk and in the reply's wcc
// post-op attributes.
func TestWriteClearsSetID(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	rootFH, ms := mnt(t, env.client(t, true, 0, 0), "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}
	n := nfsc{t, env.client(t, false, 0, 0)}
	for _, tc := range []struct {
		name      string
		uid, gid  uint32 // the writer; the file is 1000:1000
		groups    []uint32
		mode      uint32
		data      string
		wantAfter uint32
	}{
		{"other clears suid and sgid with group exec", 2000, 2000, nil, 0o6777, "x", 0o777},
		{"owner clears suid", 1000, 1000, nil, 0o4755, "x", 0o755},
		{"group member keeps sgid without group exec", 2000, 2000, []uint32{1000}, 0o2766, "x", 0o2766},
		{"non-member clears sgid without group exec", 2000, 2000, nil, 0o2766, "x", 0o766},
		{"group member clears sgid with group exec", 2000, 1000, nil, 0o2777, "x", 0o777},
		{"root keeps both", 0, 0, nil, 0o6777, "x", 0o6777},
		{"empty write changes nothing", 2000, 2000, nil, 0o6777, "", 0o6777},
		{"no set-id bits", 2000, 2000, nil, 0o777, "x", 0o777},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Base(t.Name())
			c := n.create(rootFH, name, nfs3.CreateHow{})
			wantStatus(t, "CREATE", c.Status, nfs3.OK)
			var sr nfs3.SetattrRes
			n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}}, &sr)
			wantStatus(t, "SETATTR chown", sr.Status, nfs3.OK)
			n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: sattrMode(tc.mode)}, &sr)
			wantStatus(t, "SETATTR mode", sr.Status, nfs3.OK)
			if got := sr.Wcc.After.Attr.Mode & 0o7777; got != tc.mode {
				t.Fatalf("mode after SETATTR %#o, want %#o", got, tc.mode)
			}
			w := nfsc{t, env.client(t, false, tc.uid, tc.gid, tc.groups...)}
			wr := w.write(c.Obj.FH, 0, []byte(tc.data), nfs3.FileSync)
			wantStatus(t, "WRITE", wr.Status, nfs3.OK)
			if int(wr.Count) != len(tc.data) {
				t.Fatalf("WRITE count %d, want %d", wr.Count, len(tc.data))
			}
			if !wr.Wcc.After.Set {
				t.Fatal("WRITE reply without post-op attributes")
			}
			if got := wr.Wcc.After.Attr.Mode & 0o7777; got != tc.wantAfter {
				t.Errorf("WRITE post-op mode %#o, want %#o", got, tc.wantAfter)
			}
			fi, err := os.Stat(filepath.Join(root, "exp", name))
			if err != nil {
				t.Fatal(err)
			}
			got := uint32(fi.Mode().Perm())
			if fi.Mode()&os.ModeSetuid != 0 {
				got |= 0o4000
			}
			if fi.Mode()&os.ModeSetgid != 0 {
				got |= 0o2000
			}
			if got != tc.wantAfter {
				t.Errorf("mode on disk %#o, want %#o", got, tc.wantAfter)
			}
			if fi.Size() != int64(len(tc.data)) {
				t.Errorf("size on disk %d, want %d", fi.Size(), len(tc.data))
			}
		})
	}
}

// TestSetattrClearsSetID: a SETATTR of the size (truncate(2), ftruncate,
// open with O_TRUNC) by a caller other than root clears the set-user-ID
// bit, and set-group-ID when group execute is set or the caller is not in
// the file's group, also when the size does not change, as do_truncate
// does for a caller without CAP_FSETID; root's keeps them. A chown
// clears them whoever makes it (set-group-ID without group execute is
// kept), as chown(2) does. Checked in the reply's wcc post-op attributes
// and on disk.
func TestSetattrClearsSetID(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	rootFH, ms := mnt(t, env.client(t, true, 0, 0), "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}
	n := nfsc{t, env.client(t, false, 0, 0)}
	for _, tc := range []struct {
		name      string
		uid, gid  uint32 // the caller; the file is 1000:1000, mode 0666 but for the set-ID bits
		groups    []uint32
		mode      uint32
		attr      nfs3.Sattr
		wantAfter uint32
	}{
		{"other truncates", 2000, 2000, nil, 0o6777, nfs3.Sattr{SetSize: true, Size: 0}, 0o777},
		{"other extends", 2000, 2000, nil, 0o6777, nfs3.Sattr{SetSize: true, Size: 10}, 0o777},
		{"other sets the same size", 2000, 2000, nil, 0o6777, nfs3.Sattr{SetSize: true, Size: 4}, 0o777},
		{"owner truncates", 1000, 1000, nil, 0o4755, nfs3.Sattr{SetSize: true}, 0o755},
		{"group member keeps sgid without group exec", 2000, 2000, []uint32{1000}, 0o2766, nfs3.Sattr{SetSize: true}, 0o2766},
		{"non-member loses sgid without group exec", 2000, 2000, nil, 0o2766, nfs3.Sattr{SetSize: true}, 0o766},
		{"root truncates, keeps both", 0, 0, nil, 0o6777, nfs3.Sattr{SetSize: true}, 0o6777},
		{"owner sets mode and size", 1000, 1000, nil, 0o755, nfs3.Sattr{SetMode: true, Mode: 0o6755, SetSize: true}, 0o755},
		{"root chowns", 0, 0, nil, 0o6777, nfs3.Sattr{SetUID: true, UID: 1001}, 0o777},
		{"root chowns, sgid without group exec kept", 0, 0, nil, 0o6766, nfs3.Sattr{SetGID: true, GID: 1001}, 0o2766},
		{"owner chowns to itself", 1000, 1000, nil, 0o6777, nfs3.Sattr{SetUID: true, UID: 1000}, 0o777},
		{"no set-id bits", 2000, 2000, nil, 0o777, nfs3.Sattr{SetSize: true}, 0o777},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Base(t.Name())
			c := n.create(rootFH, name, nfs3.CreateHow{})
			wantStatus(t, "CREATE", c.Status, nfs3.OK)
			wr := n.write(c.Obj.FH, 0, []byte("data"), nfs3.FileSync)
			wantStatus(t, "WRITE", wr.Status, nfs3.OK)
			var sr nfs3.SetattrRes
			n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}}, &sr)
			wantStatus(t, "SETATTR chown", sr.Status, nfs3.OK)
			n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: sattrMode(tc.mode)}, &sr)
			wantStatus(t, "SETATTR mode", sr.Status, nfs3.OK)
			w := nfsc{t, env.client(t, false, tc.uid, tc.gid, tc.groups...)}
			w.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: c.Obj.FH, Attr: tc.attr}, &sr)
			wantStatus(t, "SETATTR", sr.Status, nfs3.OK)
			if !sr.Wcc.After.Set {
				t.Fatal("SETATTR reply without post-op attributes")
			}
			if got := sr.Wcc.After.Attr.Mode & 0o7777; got != tc.wantAfter {
				t.Errorf("SETATTR post-op mode %#o, want %#o", got, tc.wantAfter)
			}
			if tc.attr.SetSize && sr.Wcc.After.Attr.Size != tc.attr.Size {
				t.Errorf("size %d, want %d", sr.Wcc.After.Attr.Size, tc.attr.Size)
			}
			fi, err := os.Stat(filepath.Join(root, "exp", name))
			if err != nil {
				t.Fatal(err)
			}
			got := uint32(fi.Mode().Perm())
			if fi.Mode()&os.ModeSetuid != 0 {
				got |= 0o4000
			}
			if fi.Mode()&os.ModeSetgid != 0 {
				got |= 0o2000
			}
			if got != tc.wantAfter {
				t.Errorf("mode on disk %#o, want %#o", got, tc.wantAfter)
			}
		})
	}
}
