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
