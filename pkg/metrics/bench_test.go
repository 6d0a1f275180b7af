package metrics

import (
	"context"
	"net"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// BenchmarkDispatchRPCServer measures sunrpc.Server.Dispatch of an NFSv3
// GETATTR-sized call (AUTH_SYS, a 32-byte handle, 84 bytes of results)
// without an observer (the baseline) and with RPCServer observing it.
func BenchmarkDispatchRPCServer(b *testing.B) {
	srv := sunrpc.NewServer(nil)
	attr := make([]byte, 84)
	srv.Register(nfs3.Program, nfs3.Version, []sunrpc.Handler{nfs3.ProcGetattr: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		d := req.ArgsDecoder()
		d.Opaque(nfs3.FHSize)
		if err := d.Err(); err != nil {
			return err
		}
		res.Uint32(0)
		res.Fixed(attr)
		return nil
	}})
	cred, _ := (&sunrpc.AuthSysParams{MachineName: "node-1", UID: 1000, GID: 1000, GIDs: []uint32{1000, 27}}).Credential()
	e := xdr.NewEncoder(nil)
	h := sunrpc.CallHeader{XID: 9, RPCVers: 2, Prog: nfs3.Program, Vers: nfs3.Version, Proc: nfs3.ProcGetattr, Cred: cred}
	h.Encode(e)
	e.Opaque(make([]byte, 32))
	call := e.Bytes()
	peer := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 700}
	for _, c := range []struct {
		name string
		o    sunrpc.Observer
	}{{"baseline=no-observer", nil}, {"observer=RPCServer", NewRPCServer(nil)}} {
		b.Run(c.name, func(b *testing.B) {
			srv.SetObserver(c.o)
			var req sunrpc.Request
			out := sunrpc.NewBuilder(make([]byte, 0, 512))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				req.Reset(call, nil, peer, "rdma")
				out.Reset(out.Bytes()[:0])
				if !srv.Dispatch(ctx, &req, out) {
					b.Fatal("dropped")
				}
			}
		})
	}
	srv.SetObserver(nil)
}
