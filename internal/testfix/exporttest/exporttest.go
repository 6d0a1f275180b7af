// Package exporttest runs a real export server, as `driver server` does
// (package exportd: the protocol server with a volume registry), on
// loopback for the tests of the packages above it: NFS and MOUNT over
// TCP, and NFS over RPC-over-RDMA on software iWARP when asked, served
// until the test ends.
package exporttest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/exportd"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// Options shape the server. Without Exports, Volume (default "vol") is
// made with Quota bytes (0: none) and granted to Node (default "node-1")
// at 127.0.0.1, and the root is exported to no one; with Exports, those
// are the static exports (server.Export paths under the root) and a
// volume is made only when Volume is set. ReadMapBytes is the server's
// nfsserver.Options.ReadMapBytes.
type Options struct {
	Volume       string
	Quota        int64
	Node         string
	Exports      []nfsserver.Export
	ReadMapBytes int64
	// RDMA serves NFS over RPC-over-RDMA too, on a software iWARP device
	// configured by SIW, with the listener's options RDMAOptions.
	RDMA        bool
	SIW         siw.Config
	RDMAOptions rpcrdma.ServerOptions
	// WrapNFS, when set, wraps the NFS listener (to watch connections).
	WrapNFS func(net.Listener) net.Listener
}

// Export is a running export server.
type Export struct {
	Root             string // the exported directory; the volume is Root/Volume
	Srv              *nfsserver.Server
	Reg              *volumes.Registry
	NFSPort, MntPort int
	// RDMA is the NFS/RDMA listener and RDMAPort its port (Options.RDMA).
	RDMA     *rpcrdma.Server
	RDMAPort int
	stop     func()
}

// Start serves a fresh directory on loopback until t ends; it needs root
// (file handles by name_to_handle_at), skipping t without it (failing it
// under CI=true).
func Start(t testing.TB, o Options) *Export {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	if o.Volume == "" && len(o.Exports) == 0 {
		o.Volume = "vol"
	}
	if o.Node == "" {
		o.Node = "node-1"
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, o.Volume), 0o777); err != nil {
		t.Fatal(err)
	}
	exps := o.Exports
	if len(exps) == 0 {
		// the root to no client: only the volume is reachable
		exps = []nfsserver.Export{{Path: "/", ExplicitClients: true}}
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var nfsL net.Listener = nl
	if o.WrapNFS != nil {
		nfsL = o.WrapNFS(nl)
	}
	cfg := exportd.Config{
		Root: root, Exports: exps, Listen: "127.0.0.1", NLMPort: -1, ReadMapBytes: o.ReadMapBytes,
		Listeners: exportd.Listeners{NFS: nfsL},
	}
	if o.RDMA {
		cfg.RDMAPort = testenv.FreePort(t)
		cfg.RDMADevice = siw.NewDevice(o.SIW)
		cfg.RDMA = o.RDMAOptions
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := exportd.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if o.Volume != "" {
		if _, err := s.Registry().AddVolume(o.Volume, o.Quota, nil); err != nil {
			cancel()
			s.Close()
			t.Fatal(err)
		}
		if err := s.Registry().Grant(o.Volume, admin.Access{Node: o.Node, Addrs: []string{"127.0.0.1"}}); err != nil {
			cancel()
			s.Close()
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	var once sync.Once
	e := &Export{Root: root, Srv: s.Protocol(), Reg: s.Registry(), NFSPort: s.Ports().NFS, MntPort: s.Ports().Mount,
		RDMA: s.RDMA(), RDMAPort: s.Ports().RDMA}
	e.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("export server: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("the export server did not stop")
			}
		})
	}
	t.Cleanup(e.stop)
	return e
}

// Stop stops the server (it is stopped at the end of the test anyway).
func (e *Export) Stop() { e.stop() }

// TCPOptions are the mount options (nfs(5) style) that reach e over TCP.
func (e *Export) TCPOptions() string {
	return "proto=tcp,port=" + strconv.Itoa(e.NFSPort) + ",mountport=" + strconv.Itoa(e.MntPort)
}
