package server

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestChownRules: SETATTR of the owner and group follows Linux's
// chown_ok and chgrp_ok for a caller without CAP_CHOWN (as knfsd, which
// calls notify_change as the caller): a non-owner may not chown or chgrp,
// not even to the current ids (NFS3ERR_PERM); the owner may chown to
// itself and chgrp to the current group or one of its groups; uid 0 may
// do anything, unless squashed. A chown to the same ids still clears the
// set-user-ID bit, as chown(2) does.
func TestChownRules(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	mc := env.client(t, true, 0, 0)
	n := nfsc{t, env.client(t, false, 0, 0)}
	owner := nfsc{t, env.client(t, false, 1000, 1000, 1000, 2000)}
	other := nfsc{t, env.client(t, false, 1001, 1000, 1000, 2000)}
	rootFH, ms := mnt(t, mc, "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}
	f := n.create(rootFH, "f", nfs3.CreateHow{Attr: sattrMode(0o644)})
	wantStatus(t, "CREATE", f.Status, nfs3.OK)
	fh := f.Obj.FH
	path := filepath.Join(root, "exp", "f")
	setOwner := func(uid, gid int, mode uint32) {
		t.Helper()
		must(t, os.Lchown(path, uid, gid))
		must(t, syscall.Chmod(path, mode))
	}
	ids := func() (uint32, uint32) {
		t.Helper()
		fi, err := os.Lstat(path)
		must(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	for _, tc := range []struct {
		name     string
		c        nfsc
		sa       nfs3.Sattr
		want     nfs3.Status
		uid, gid uint32 // after
	}{
		{"non-owner chown to the current owner and group", other, nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}, nfs3.ErrPerm, 1000, 1000},
		{"non-owner chown to the current owner", other, nfs3.Sattr{SetUID: true, UID: 1000}, nfs3.ErrPerm, 1000, 1000},
		{"non-owner chgrp to the current group", other, nfs3.Sattr{SetGID: true, GID: 1000}, nfs3.ErrPerm, 1000, 1000},
		{"non-owner chown to itself", other, nfs3.Sattr{SetUID: true, UID: 1001}, nfs3.ErrPerm, 1000, 1000},
		{"owner chown to itself", owner, nfs3.Sattr{SetUID: true, UID: 1000}, nfs3.OK, 1000, 1000},
		{"owner chown to the same owner and group", owner, nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}, nfs3.OK, 1000, 1000},
		{"owner chown away", owner, nfs3.Sattr{SetUID: true, UID: 1001}, nfs3.ErrPerm, 1000, 1000},
		{"owner chgrp to a supplementary group", owner, nfs3.Sattr{SetGID: true, GID: 2000}, nfs3.OK, 1000, 2000},
		{"owner chgrp to a group it is not in", owner, nfs3.Sattr{SetGID: true, GID: 3000}, nfs3.ErrPerm, 1000, 1000},
		{"root chown to anyone", n, nfs3.Sattr{SetUID: true, UID: 4000, SetGID: true, GID: 4000}, nfs3.OK, 4000, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setOwner(1000, 1000, 0o644)
			var sr nfs3.SetattrRes
			tc.c.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, Attr: tc.sa}, &sr)
			wantStatus(t, tc.name, sr.Status, tc.want)
			if u, g := ids(); u != tc.uid || g != tc.gid {
				t.Fatalf("owner %d:%d after, want %d:%d", u, g, tc.uid, tc.gid)
			}
		})
	}
	t.Run("same ids clear set-user-ID", func(t *testing.T) {
		setOwner(1000, 1000, 0o4755)
		var sr nfs3.SetattrRes
		owner.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, Attr: nfs3.Sattr{SetUID: true, UID: 1000, SetGID: true, GID: 1000}}, &sr)
		wantStatus(t, "owner chown to the same ids", sr.Status, nfs3.OK)
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_ISUID != 0 {
			t.Fatalf("after chown to the same ids: mode %o, %v; want set-user-ID cleared", st.Mode, err)
		}
	})
	t.Run("squashed root", func(t *testing.T) {
		setOwner(1000, 1000, 0o644)
		sq := append([]Export(nil), exps...)
		sq[0].RootSquash = true
		must(t, env.srv.SetExports(sq))
		defer env.srv.SetExports(exps)
		var sr nfs3.SetattrRes
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, Attr: nfs3.Sattr{SetUID: true, UID: 1000}}, &sr)
		wantStatus(t, "squashed root chown to the current owner", sr.Status, nfs3.ErrPerm)
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
