package server

import (
	"context"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

const testAdminToken = "s3cret-admin-token"

// volEnv is a running server with volumes: NFS and MOUNT over TCP, NFS
// over RDMA (software iWARP) when asked, and the admin API on a real
// listener.
type volEnv struct {
	root, state      string
	srv              *Server
	reg              *volumes.Registry
	nfsPort, mntPort int
	rdmaAddr         string
	adm              *admin.Client
	http             *httptest.Server
	cancel           context.CancelFunc
	done             chan error
	servers          int
}

// startVolume starts startVolEnv on root and state with the directory
// root/vol, which the caller made, as the volume "vol" of quota bytes (0:
// unlimited) granted to node at 127.0.0.1.
func startVolume(t testing.TB, root, state string, rdma bool, quota int64, node string) *volEnv {
	t.Helper()
	e := startVolEnv(t, root, state, rdma)
	ctx := ctxLong(t)
	if _, err := e.adm.PutVolume(ctx, "vol", quota); err != nil {
		t.Fatal(err)
	}
	if err := e.adm.Grant(ctx, "vol", admin.Access{Node: node, Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startVolEnv starts a registry on root with state directory state and
// a server exporting it besides the static exports exps.
func startVolEnv(t testing.TB, root, state string, rdma bool, exps ...Export) *volEnv {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	reg, err := volumes.New(volumes.Options{Root: root, StateDir: state, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Root: root, Exports: exps, Volumes: reg})
	if err != nil {
		reg.Close()
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &volEnv{root: root, state: state, srv: srv, reg: reg, cancel: cancel, done: make(chan error, 3), servers: 1,
		nfsPort: nl.Addr().(*net.TCPAddr).Port, mntPort: ml.Addr().(*net.TCPAddr).Port}
	go func() { e.done <- srv.Serve(ctx, nl, ml) }()
	if rdma {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e.rdmaAddr = l.Addr().String()
		l.Close()
		e.servers++
		go func() {
			e.done <- serveRDMA(ctx, srv, siw.NewDevice(siw.Config{RTRDelay: -1}), e.rdmaAddr, rpcrdma.ServerOptions{Credits: 16})
		}()
	}
	h, err := admin.NewHandler(reg, testAdminToken)
	if err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(h)
	e.adm = admin.NewClient(e.http.URL, testAdminToken, nil)
	t.Cleanup(e.stop)
	return e
}

func (e *volEnv) stop() {
	if e.cancel == nil {
		return
	}
	e.http.Close()
	e.cancel()
	for range e.servers {
		<-e.done
	}
	e.srv.Close()
	e.reg.Close()
	e.cancel = nil
}

// mount mounts export with our NFS client over proto ("tcp" or "rdma")
// as uid 0.
func (e *volEnv) mount(ctx context.Context, export, proto string) (*client.Client, error) {
	opts := client.Options{
		Server: "127.0.0.1", NFSPort: e.nfsPort, MountPort: e.mntPort, Export: export,
		AuthSys: sunrpc.AuthSysParams{MachineName: "test"},
		Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 2},
	}
	if proto == "rdma" {
		opts.Transport = "rdma"
		opts.Dial = rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), e.rdmaAddr, rpcrdma.ClientOptions{})
	}
	return client.Mount(ctx, opts)
}

// rpcClient returns a raw AUTH_SYS RPC client of the NFS or MOUNT port.
func (e *volEnv) rpcClient(t testing.TB, mount bool) *sunrpc.Client {
	t.Helper()
	port := e.nfsPort
	if mount {
		port = e.mntPort
	}
	return authSysClient(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 0, 0)
}

func ctxLong(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
