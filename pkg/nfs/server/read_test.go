package server

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestReadIfExec: READ needs read or execute permission (a client reads
// the program it runs, as knfsd allows with NFSD_MAY_READ_IF_EXEC), or
// ownership; neither is NFS3ERR_ACCES.
func TestReadIfExec(t *testing.T) {
	root, exps := layout(t)
	env := startServer(t, root, exps)
	mc := env.client(t, true, 0, 0)
	n := nfsc{t, env.client(t, false, 0, 0)}
	user := nfsc{t, env.client(t, false, 1000, 1000)}
	rootFH, ms := mnt(t, mc, "/exp")
	if ms != mount3.OK {
		t.Fatalf("MNT /exp: %v", ms)
	}
	for _, c := range []struct {
		mode uint32
		want nfs3.Status
	}{{0o711, nfs3.OK}, {0o744, nfs3.OK}, {0o700, nfs3.ErrAccess}, {0o702, nfs3.ErrAccess}} {
		f := n.create(rootFH, "prog", nfs3.CreateHow{Attr: sattrMode(c.mode)})
		wantStatus(t, "CREATE", f.Status, nfs3.OK)
		var sr nfs3.SetattrRes
		n.do(nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: f.Obj.FH, Attr: sattrMode(c.mode)}, &sr)
		wantStatus(t, "SETATTR", sr.Status, nfs3.OK)
		wantStatus(t, "READ as another user, mode "+modeString(c.mode), user.read(f.Obj.FH, 0, 10).Status, c.want)
	}
}

func modeString(m uint32) string {
	return string([]byte{'0' + byte(m>>6&7), '0' + byte(m>>3&7), '0' + byte(m&7)})
}
