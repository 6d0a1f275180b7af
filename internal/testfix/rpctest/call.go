package rpctest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// CallRaw makes one soft call (no retransmission) of prog/vers/proc with
// the XDR-encoded args over a TCP connection that dial opens, and decodes
// the reply with results (replies up to 4 KiB, 10 s at most). It returns
// the call's error: a transport failure, or the RPC layer's rejection or
// accept_stat as sunrpc reports them.
func CallRaw(t testing.TB, dial func(ctx context.Context) (net.Conn, error), prog, vers, proc uint32, args []byte, results func(*xdr.Decoder, int) error) error {
	t.Helper()
	c, err := sunrpc.NewClient(func(ctx context.Context) (sunrpc.ClientTransport, error) {
		conn, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return sunrpc.NewTCPTransport(conn, sunrpc.TCPOptions{}), nil
	}, sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, sunrpc.CallSpec{Prog: prog, Vers: vers, Proc: proc,
		Args: func(b *sunrpc.Builder) { b.Fixed(args) }, Results: results, MaxReplySize: 4096})
}
