package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzDispatch sends arbitrary argument bytes to every NFS procedure (and,
// with the high bit of proc, every MOUNT procedure) through the server's
// dispatcher, as root. No input may panic the server, and the directories
// outside the export must stay as they were.
func FuzzDispatch(f *testing.F) {
	testenv.NeedRoot(f, "the export server (name_to_handle_at, open_by_handle_at)")
	root := f.TempDir()
	testenv.MustWrite(f, filepath.Join(root, "outside", "secret.txt"), []byte("secret"))
	os.Mkdir(filepath.Join(root, "exp"), 0o755)
	testenv.MustWrite(f, filepath.Join(root, "exp", "file"), []byte("data"))
	os.Symlink("../outside", filepath.Join(root, "exp", "ln"))
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/exp"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	t := srv.exports.Load()
	rootFH, _ := nfs3.NewFH(t.list[0].rootFH[:t.list[0].fhLen])
	var fileFH nfs3.FH
	{
		fd, _ := openForTest(root, "exp")
		fileFH, _ = srv.seal.makeFH(t.list[0].id, fd, "file", 0)
		closeForTest(fd)
	}
	dir := func(name string) nfs3.DirOpArgs { return nfs3.DirOpArgs{Dir: rootFH, Name: name} }
	enc := func(m interface{ Encode(*xdr.Encoder) }) []byte {
		e := xdr.NewEncoder(nil)
		m.Encode(e)
		return e.Bytes()
	}
	encDDP := func(m nfs3.DDPMessage) []byte {
		e := xdr.NewEncoder(nil)
		m.EncodeInline(e)
		return e.Bytes()
	}
	seeds := map[uint8][]byte{
		nfs3.ProcGetattr:      enc(&nfs3.GetattrArgs{Object: rootFH}),
		nfs3.ProcSetattr:      enc(&nfs3.SetattrArgs{Object: fileFH, Attr: nfs3.Sattr{SetSize: true, Size: 3}}),
		nfs3.ProcLookup:       enc(&nfs3.LookupArgs{What: dir("..")}),
		nfs3.ProcAccess:       enc(&nfs3.AccessArgs{Object: rootFH, Access: 0x3f}),
		nfs3.ProcReadlink:     enc(&nfs3.ReadlinkArgs{Symlink: fileFH}),
		nfs3.ProcRead:         enc(&nfs3.ReadArgs{File: fileFH, Count: 10}),
		nfs3.ProcWrite:        encDDP(&nfs3.WriteArgs{File: fileFH, Data: []byte("xyz")}),
		nfs3.ProcCreate:       enc(&nfs3.CreateArgs{Where: dir("new")}),
		nfs3.ProcMkdir:        enc(&nfs3.MkdirArgs{Where: dir("d")}),
		nfs3.ProcSymlink:      encDDP(&nfs3.SymlinkArgs{Where: dir("s"), Path: []byte("/etc")}),
		nfs3.ProcMknod:        enc(&nfs3.MknodArgs{Where: dir("p"), Type: nfs3.TypeFIFO}),
		nfs3.ProcRemove:       enc(&nfs3.RemoveArgs{Object: dir("new")}),
		nfs3.ProcRmdir:        enc(&nfs3.RmdirArgs{Object: dir("d")}),
		nfs3.ProcRename:       enc(&nfs3.RenameArgs{From: dir("ln"), To: dir("ln2")}),
		nfs3.ProcLink:         enc(&nfs3.LinkArgs{File: fileFH, Link: dir("hl")}),
		nfs3.ProcReaddir:      enc(&nfs3.ReaddirArgs{Dir: rootFH, Count: 4096}),
		nfs3.ProcReaddirplus:  enc(&nfs3.ReaddirplusArgs{Dir: rootFH, MaxCount: 4096}),
		nfs3.ProcFsstat:       enc(&nfs3.FsstatArgs{FSRoot: rootFH}),
		nfs3.ProcFsinfo:       enc(&nfs3.FsinfoArgs{FSRoot: rootFH}),
		nfs3.ProcPathconf:     enc(&nfs3.PathconfArgs{Object: rootFH}),
		nfs3.ProcCommit:       enc(&nfs3.CommitArgs{File: fileFH}),
		0x80 | mount3.ProcMnt: enc(&mount3.MntArgs{Path: "/exp/../outside"}),
	}
	for proc, args := range seeds {
		f.Add(proc, args)
	}
	f.Add(uint8(nfs3.ProcLookup), enc(&nfs3.LookupArgs{What: dir("ln/secret.txt")}))
	cred, _ := (&sunrpc.AuthSysParams{MachineName: "fuzz"}).Credential()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}
	before := listNames(f, root, "outside")
	f.Fuzz(func(t *testing.T, proc uint8, args []byte) {
		h := sunrpc.CallHeader{XID: 1, RPCVers: sunrpc.RPCVersion, Prog: nfs3.Program, Vers: nfs3.Version, Proc: uint32(proc % nfs3.NumProcs), Cred: cred}
		if proc&0x80 != 0 {
			h.Prog, h.Vers, h.Proc = mount3.Program, mount3.Version, uint32(proc&0x7f)%mount3.NumProcs
		}
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		raw := append(e.Bytes(), args...)
		var req sunrpc.Request
		req.Reset(raw, nil, peer, "fuzz")
		b := sunrpc.NewBuilder(make([]byte, 0, 1024))
		if !srv.Dispatcher().Dispatch(context.Background(), &req, b) {
			t.Fatal("call dropped")
		}
		msg := b.Message()
		var d xdr.Decoder
		d.Reset(msg.Head)
		if rh, err := sunrpc.DecodeReplyHeader(&d); err != nil || rh.Accept == sunrpc.SystemErr {
			t.Fatalf("reply %+v, %v (a handler failed or panicked)", rh, err)
		}
		b.RunAfterSend()
		if got := listNames(t, root, "outside"); !slices.Equal(got, before) {
			t.Fatalf("outside the export changed: %v", got)
		}
		if data, err := os.ReadFile(filepath.Join(root, "outside", "secret.txt")); err != nil || string(data) != "secret" {
			t.Fatalf("secret.txt changed: %q %v", data, err)
		}
	})
}

// listNames returns the names under root other than the export, recursively
// below sub, and the root's own entries.
func listNames(t testing.TB, root, sub string) []string {
	t.Helper()
	var names []string
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	filepath.WalkDir(filepath.Join(root, sub), func(p string, d os.DirEntry, err error) error {
		names = append(names, p)
		return nil
	})
	return names
}
