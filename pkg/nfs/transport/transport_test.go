package transport

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

func parse(t *testing.T, s string) mountopts.Options {
	t.Helper()
	o, err := mountopts.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// proto=tcp leaves dialing to the NFS client: no dialer, no name.
func TestForMountTCP(t *testing.T) {
	tr, err := ForMount("127.0.0.1", parse(t, "proto=tcp"), nil)
	if err != nil || tr.Dial != nil || tr.Name != "" {
		t.Fatalf("ForMount(tcp) = %+v, %v; want the zero NFS", tr, err)
	}
}

// proto=rdma,rdmadev=siw: a dialer over software iWARP that reaches a
// real RPC-over-RDMA responder at port=, asks the credits= given and
// counts its transport in the metrics passed.
func TestForMountRDMA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpc := sunrpc.NewServer(nil)
	srv, err := rpcrdma.Listen(ctx, siw.NewDevice(siw.Config{RTRDelay: -1}), "127.0.0.1:0", rpcrdma.ServerOptions{Credits: 8})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, rpc) }()
	defer func() { stop(); <-done; srv.Close() }()
	_, p, err := net.SplitHostPort(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	m := new(rpcrdma.ClientMetrics)
	tr, err := ForMount("127.0.0.1", parse(t, "proto=rdma,rdmadev=siw,rdmavers=1,credits=4,port="+p), m)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "rdma/"+devselect.ProviderSIW || tr.Device.Provider != devselect.ProviderSIW || tr.Dial == nil {
		t.Fatalf("ForMount(rdma) = %+v", tr)
	}
	ct, err := tr.Dial(ctx)
	if err != nil {
		t.Fatal("dial:", err)
	}
	defer ct.Close()
	if got := m.Metrics(); got.Connections != 1 || got.Version != 1 {
		t.Fatalf("metrics after dial: connections %d, version %d; want 1, 1", got.Connections, got.Version)
	}
}

// An rdmadev= that names no device is a bad option.
func TestForMountNoDevice(t *testing.T) {
	_, err := ForMount("127.0.0.1", parse(t, "proto=rdma,rdmadev=nosuchdev9"), nil)
	if !errors.Is(err, mountopts.ErrBadOption) || !errors.Is(err, devselect.ErrNotFound) {
		t.Fatalf("ForMount(rdmadev=nosuchdev9): %v; want ErrBadOption and devselect.ErrNotFound", err)
	}
}

// Each of nconnect connections asks credits/nconnect, at least 1.
func TestConnCredits(t *testing.T) {
	for _, tc := range []struct {
		opts string
		want int
	}{
		{"proto=rdma", DefaultCredits},
		{"proto=rdma,credits=16", 16},
		{"proto=rdma,credits=16,nconnect=4", 4},
		{"proto=rdma,credits=17,nconnect=4", 4},
		{"proto=rdma,credits=3,nconnect=4", 1},
		{"proto=rdma,nconnect=16", DefaultCredits / 16},
	} {
		if got := ConnCredits(parse(t, tc.opts)); got != tc.want {
			t.Errorf("ConnCredits(%s) = %d, want %d", tc.opts, got, tc.want)
		}
	}
}
