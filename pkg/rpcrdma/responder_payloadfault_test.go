package rpcrdma

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestReplyPayloadFault: a handler answers with a DDP-eligible result that
// is a mapping of a file truncated below it (as the NFS server's READ from
// the page cache when another writer shrinks the file at that moment). The
// reply copies it inline; the fault (SIGBUS) must close the connection,
// not end the process, and the server must go on answering on a new one.
func TestReplyPayloadFault(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := os.Truncate(name, 0); err != nil {
		t.Fatal(err)
	}
	ts := &testSrv{done: make(chan error, 1)}
	ts.rpc = sunrpc.NewServer(nil)
	ts.rpc.Register(tProg, tVers, []sunrpc.Handler{
		1: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			res.Payload(mem[4096 : 4096+100])
			return nil
		},
		2: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			res.Opaque([]byte("ok"))
			return nil
		},
	})
	ts.srv, err = Listen(context.Background(), newDev(), "127.0.0.1:0", ServerOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	ctx, ts.cancel = context.WithCancel(context.Background())
	go func() { ts.done <- ts.srv.Serve(ctx, ts.rpc) }()
	t.Cleanup(ts.stop)

	c, _ := newClient(t, ts, ClientOptions{})
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, err := call(cctx, c, 1, nil, false, 0, nil, 0); err == nil {
		t.Fatal("a reply whose payload faulted was answered")
	}
	c2, _ := newClient(t, ts, ClientOptions{})
	if _, _, err := call(tctx(t, 10*time.Second), c2, 2, nil, false, 0, nil, 0); err != nil {
		t.Fatal("the server does not answer after the fault:", err)
	}
}
