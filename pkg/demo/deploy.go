package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/exportd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// Names the demo gives its node, as kubelet and the CSI driver would.
const (
	nodeName    = "demo-node"
	nodeAddress = "127.0.0.1"
	serverHost  = "127.0.0.1"
	// serverCredits is what the export server grants per RPC-over-RDMA
	// connection at most; each pod's mount asks for its share.
	serverCredits = 32
	// readyTimeout bounds the start of each service.
	readyTimeout = 30 * time.Second
	// maxSocketPath is the longest unix socket path (sun_path) Linux takes.
	maxSocketPath = 107
)

// deployment is the whole product on this machine, in this process: the
// export server (NFS over TCP and RPC-over-RDMA, MOUNT, admin API), the
// mounter, the CSI controller and the CSI node plugin, each on its own
// listener, as they run in a cluster.
type deployment struct {
	dir                             string
	root, state, kubelet, mounts    string
	ctrlSock, nodeSock, mounterSock string
	ports                           csi.ServerPorts
	token                           string
	srv                             *exportd.Server // served until ctx ends
	mnt                             *mounter.Server
	ctrl                            csipb.ControllerClient
	node                            csipb.NodeClient
	ident                           csipb.IdentityClient
	ctrlConn, nodeConn              *grpc.ClientConn
	ctx                             context.Context // the services': ends at stop
	cancel                          context.CancelFunc
	wg                              sync.WaitGroup
	errMu                           sync.Mutex
	errs                            []error // services that stopped with an error
	pluginsStarted                  bool    // startPlugins began: the CSI services may hold state
	done                            bool    // stop ran
}

// newDeployment lays out dir (export, state, kubelet, mounts, run) and
// makes the admin API's random token; nothing runs yet. A dir too long for
// the unix sockets beneath it is an ErrUsage error.
func newDeployment(dir string) (*deployment, error) {
	d := &deployment{
		dir:         dir,
		root:        filepath.Join(dir, "export"),
		state:       filepath.Join(dir, "state"),
		kubelet:     filepath.Join(dir, "kubelet"),
		mounts:      filepath.Join(dir, "mounts"),
		ctrlSock:    filepath.Join(dir, "run", "controller.sock"),
		nodeSock:    filepath.Join(dir, "run", "node.sock"),
		mounterSock: filepath.Join(dir, "run", "mounter.sock"),
	}
	if len(d.mounterSock) > maxSocketPath {
		return nil, fmt.Errorf("%w: --dir %s is too long for unix socket paths (%d bytes, at most %d): choose a shorter one", ErrUsage, dir, len(d.mounterSock), maxSocketPath)
	}
	for _, p := range []string{d.root, d.state, d.kubelet, d.mounts, filepath.Dir(d.ctrlSock)} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	d.token = hex.EncodeToString(tok)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d, nil
}

// goService runs fn until the deployment stops, recording its error.
func (d *deployment) goService(name string, fn func() error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := fn(); err != nil {
			klog.ErrorS(err, "demo: service stopped", "service", name)
			d.errMu.Lock()
			d.errs = append(d.errs, fmt.Errorf("%s: %w", name, err))
			d.errMu.Unlock()
		}
	}()
}

// failed returns the first service error, if any.
func (d *deployment) failed() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return errors.Join(d.errs...)
}

// startServer starts the export server (package exportd, as driver
// server) on DIR/export with its registry in DIR/state: NFS, MOUNT, NLM
// and NSM over TCP, NFS over RPC-over-RDMA (software iWARP), the admin API
// with a random token; all on free loopback ports.
func (d *deployment) startServer() error {
	ctx := d.ctx
	adminL, err := net.Listen("tcp", serverHost+":0")
	if err != nil {
		return err
	}
	rdmaPort, err := freePort()
	if err != nil {
		adminL.Close()
		return err
	}
	srv, err := exportd.New(ctx, exportd.Config{
		Root:       d.root,
		Listen:     serverHost,
		RDMAPort:   rdmaPort,
		RDMA:       rpcrdma.ServerOptions{Credits: serverCredits},
		StateDir:   d.state,
		Version:    "demo",
		AdminToken: d.token,
		Listeners:  exportd.Listeners{Admin: adminL},
	})
	if err != nil {
		return fmt.Errorf("%w: export server on %s: %v (use --dir on a local file system with file handles: ext4, xfs, btrfs, tmpfs)", ErrHost, d.root, err)
	}
	d.srv = srv
	p := srv.Ports()
	d.ports = csi.ServerPorts{NFS: p.NFS, Mount: p.Mount, Admin: p.Admin, RDMA: p.RDMA, NLM: p.NLM}
	d.goService("export server", func() error { return srv.Serve(ctx) })
	return d.waitFor("the export server's RDMA listener", func() bool { return listening(rdmaPort) })
}

// startPlugins starts the mounter (it runs exe as `driver mount` for each
// mount), the CSI node plugin and the CSI controller plugin on unix
// sockets in DIR/run, and connects gRPC clients to them.
func (d *deployment) startPlugins(ctx context.Context, exe string) error {
	sctx := d.ctx
	d.mnt = &mounter.Server{Socket: d.mounterSock, StateDir: d.mounts, Exe: exe}
	if v := klog.V(2).Enabled(); v {
		d.mnt.ExtraArgs = []string{"--v=2"}
	}
	d.pluginsStarted = true
	d.goService("mounter", func() error { return d.mnt.Run(sctx) })
	mc := &mounter.Client{Socket: d.mounterSock}
	if err := d.waitFor("the mounter", func() bool {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := mc.List(lctx)
		return err == nil
	}); err != nil {
		return err
	}
	node, err := csi.New(csi.Config{Version: "demo", Endpoint: "unix://" + d.nodeSock, Node: true,
		NodeName: nodeName, NodeAddress: nodeAddress, MounterSocket: d.mounterSock,
		TargetRoot: d.kubelet, UnmountTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	ctrl, err := csi.New(csi.Config{Version: "demo", Endpoint: "unix://" + d.ctrlSock, Controller: true,
		Ports: d.ports, AdminToken: admin.StaticToken(d.token), Servers: []string{serverHost}})
	if err != nil {
		return err
	}
	for _, s := range []struct {
		name, sock string
		drv        *csi.Driver
	}{{"csi node", d.nodeSock, node}, {"csi controller", d.ctrlSock, ctrl}} {
		l, err := net.Listen("unix", s.sock)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		drv := s.drv
		d.goService(s.name, func() error { return drv.Serve(sctx, l) })
	}
	if d.nodeConn, err = grpcConn(d.nodeSock); err != nil {
		return err
	}
	if d.ctrlConn, err = grpcConn(d.ctrlSock); err != nil {
		return err
	}
	d.node = csipb.NewNodeClient(d.nodeConn)
	d.ctrl = csipb.NewControllerClient(d.ctrlConn)
	d.ident = csipb.NewIdentityClient(d.ctrlConn)
	// both answer Probe once serving (the node: the mounter reachable;
	// the controller: the export server reachable)
	for _, c := range []*grpc.ClientConn{d.nodeConn, d.ctrlConn} {
		id := csipb.NewIdentityClient(c)
		err := d.waitFor(c.Target(), func() bool {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			r, err := id.Probe(pctx, &csipb.ProbeRequest{})
			return err == nil && (r.GetReady() == nil || r.GetReady().GetValue())
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls ready every 50 ms until it holds, a service fails, or
// readyTimeout passes.
func (d *deployment) waitFor(what string, ready func() bool) error {
	deadline := time.Now().Add(readyTimeout)
	for !ready() {
		if err := d.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %s not ready within %v", what, readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// stop stops every service (plugins first, the export server last) and
// waits for them, at most 20 s. Mounts must be gone before (the FUSE
// servers are separate processes that end when unmounted).
func (d *deployment) stop() error {
	if d.done {
		return nil
	}
	d.done = true
	for _, c := range []*grpc.ClientConn{d.ctrlConn, d.nodeConn} {
		if c != nil {
			c.Close()
		}
	}
	if d.cancel != nil {
		d.cancel()
	}
	wait := make(chan struct{})
	go func() { d.wg.Wait(); close(wait) }()
	var err error
	select {
	case <-wait:
	case <-time.After(20 * time.Second):
		err = errors.New("demo: services did not stop within 20 s")
	}
	if ferr := d.failed(); err == nil {
		err = ferr
	}
	return err
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// freePort returns a TCP port free on the loopback address now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", serverHost+":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return port(l), nil
}

func grpcConn(sock string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
}
