package fusefs

import (
	"context"
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// ClientOptions passes the dialer it is handed to the NFS client, and
// refuses proto=rdma without one (it never falls back to TCP itself).
func TestClientOptionsDial(t *testing.T) {
	rdma, err := mountopts.Parse("proto=rdma,port=20050")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ClientOptions(Config{Source: "10.0.0.1:/vol", Options: rdma}); !errors.Is(err, mountopts.ErrBadOption) {
		t.Fatalf("proto=rdma without a dialer: %v; want ErrBadOption", err)
	}
	dialed := false
	dial := func(context.Context) (sunrpc.ClientTransport, error) {
		dialed = true
		return nil, errors.New("test dialer")
	}
	co, err := ClientOptions(Config{Source: "10.0.0.1:/vol", Options: rdma, Dial: dial, Transport: "rdma/test"})
	if err != nil {
		t.Fatal(err)
	}
	if co.Server != "10.0.0.1" || co.Export != "/vol" || co.NFSPort != 20050 || co.Transport != "rdma/test" || co.Dial == nil {
		t.Fatalf("client options %+v", co)
	}
	if _, err := co.Dial(context.Background()); err == nil || !dialed {
		t.Fatal("the NFS client's dialer is not the one handed over")
	}
	tcp := mountopts.Default()
	co, err = ClientOptions(Config{Source: "10.0.0.1:/vol", Options: tcp})
	if err != nil || co.Dial != nil || co.NFSPort != 0 {
		t.Fatalf("proto=tcp: %+v, %v; want the client's own TCP dialer, port from rpcbind", co, err)
	}
}
