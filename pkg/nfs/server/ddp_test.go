package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestDDP drives the dispatcher as an RPC-over-RDMA transport would: WRITE
// data and the SYMLINK target arrive outside the XDR stream
// (Request.ArgPayload, a Read chunk), and READ data and the READLINK target
// leave as the Builder's payload (for a Write chunk), not inline.
func TestDDP(t *testing.T) {
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "exp"), 0o755)
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/exp"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ex := srv.exports.Load().list[0]
	rootFH, _ := nfs3.NewFH(ex.rootFH[:ex.fhLen])
	cred, _ := (&sunrpc.AuthSysParams{MachineName: "rdma"}).Credential()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 800}
	dispatch := func(proc uint32, head func(e *xdr.Encoder), payload []byte) (sunrpc.Message, *sunrpc.Builder) {
		t.Helper()
		e := xdr.NewEncoder(nil)
		h := sunrpc.CallHeader{XID: proc, RPCVers: sunrpc.RPCVersion, Prog: nfs3.Program, Vers: nfs3.Version, Proc: proc, Cred: cred}
		h.Encode(e)
		head(e)
		var req sunrpc.Request
		req.Reset(e.Bytes(), payload, peer, "rdma")
		b := sunrpc.NewBuilder(nil)
		if !srv.Dispatcher().Dispatch(context.Background(), &req, b) {
			t.Fatal("dropped")
		}
		return b.Message(), b
	}
	decodeRes := func(m sunrpc.Message, res interface{ Decode(*xdr.Decoder) error }) {
		t.Helper()
		var d xdr.Decoder
		d.Reset(m.Head)
		if rh, err := sunrpc.DecodeReplyHeader(&d); err != nil || rh.Accept != sunrpc.Success {
			t.Fatalf("reply %+v %v", rh, err)
		}
		if err := res.Decode(&d); err != nil {
			t.Fatal(err)
		}
	}
	var cr nfs3.CreateRes
	m, _ := dispatch(nfs3.ProcCreate, func(e *xdr.Encoder) { (&nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: rootFH, Name: "f"}}).Encode(e) }, nil)
	decodeRes(m, &cr)
	data := []byte("placed by RDMA Read")
	var wr nfs3.WriteRes
	m, _ = dispatch(nfs3.ProcWrite, func(e *xdr.Encoder) {
		(&nfs3.WriteArgs{File: cr.Obj.FH, Stable: nfs3.FileSync, Data: data}).Encode(e) // up to the length word
	}, data)
	decodeRes(m, &wr)
	if wr.Status != nfs3.OK || wr.Count != uint32(len(data)) {
		t.Fatalf("WRITE with a placed argument: %+v", wr)
	}
	m, b := dispatch(nfs3.ProcRead, func(e *xdr.Encoder) { (&nfs3.ReadArgs{File: cr.Obj.FH, Count: 4096}).Encode(e) }, nil)
	if !m.HasPayload || string(m.Payload) != string(data) {
		t.Fatalf("READ result not a DDP payload: %v %q", m.HasPayload, m.Payload)
	}
	var rr nfs3.ReadRes
	full := sunrpc.Message{Head: m.AppendTo(nil)}
	decodeRes(full, ddpRes{&rr})
	if string(rr.Data) != string(data) || !rr.EOF {
		t.Fatalf("READ %q eof %v", rr.Data, rr.EOF)
	}
	b.RunAfterSend()
	target := []byte("../somewhere")
	var sr nfs3.CreateRes
	m, _ = dispatch(nfs3.ProcSymlink, func(e *xdr.Encoder) {
		(&nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: rootFH, Name: "ln"}, Path: target}).Encode(e)
	}, target)
	decodeRes(m, &sr)
	if sr.Status != nfs3.OK {
		t.Fatalf("SYMLINK with a placed target: %v", sr.Status)
	}
	m, b = dispatch(nfs3.ProcReadlink, func(e *xdr.Encoder) { (&nfs3.ReadlinkArgs{Symlink: sr.Obj.FH}).Encode(e) }, nil)
	if !m.HasPayload || string(m.Payload) != string(target) {
		t.Fatalf("READLINK result not a DDP payload: %v %q", m.HasPayload, m.Payload)
	}
	b.RunAfterSend()
	// a placed argument whose length word disagrees is GARBAGE_ARGS
	m, _ = dispatch(nfs3.ProcWrite, func(e *xdr.Encoder) {
		(&nfs3.WriteArgs{File: cr.Obj.FH, Data: data}).Encode(e)
	}, data[:3])
	var d xdr.Decoder
	d.Reset(m.Head)
	if rh, _ := sunrpc.DecodeReplyHeader(&d); rh.Accept != sunrpc.GarbageArgs {
		t.Fatalf("mismatched placed WRITE: %+v", rh)
	}
}
