// Package exportd runs the export server as `driver server` does: the
// volume registry (package volumes), the NFSv3 and MOUNT v3 protocol
// server (package server) over TCP and RPC-over-RDMA, the NLM v4 and
// NSM v1 lock services (package lockd) with their rpcbind registrations,
// and the admin API (package admin) over the registry, until the context
// ends or one of them fails.
package exportd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// DefaultReadMapBytes is the default bound of READ's file mappings
// (Config.ReadMapBytes): 64 windows of 4 MiB.
const DefaultReadMapBytes = 256 << 20

// Config is what Run serves.
type Config struct {
	// Root is the local directory served (server.Options.Root).
	Root string
	// Exports is the static export table; empty: the root, read-write to
	// every client.
	Exports []server.Export
	// HandleKeyFile holds the secret that authenticates file handles
	// (server.Options.HandleKey); empty: derived from the root.
	HandleKeyFile string
	// Listen is the address every service listens on.
	Listen string
	// NFSPort and MountPort are the TCP ports of NFS v3 and MOUNT v3.
	NFSPort, MountPort int
	// RDMAPort is the port of NFS over RPC-over-RDMA (RFC 8267); 0: off.
	RDMAPort int
	// RDMA configures the NFS/RDMA listener (credits per connection, the
	// default grant, the receive budget, the highest version).
	RDMA rpcrdma.ServerOptions
	// RDMADevice is the verbs device of the NFS/RDMA listener; nil: the
	// software iWARP provider.
	RDMADevice verbs.Device
	// NLMPort and NSMPort are the TCP ports of NLM v4 and NSM v1 (0: any
	// free port); NLMPort < 0 serves neither.
	NLMPort, NSMPort int
	// Locks configures the lock manager (NSM state directory, grace
	// period, the name given in SM_NOTIFY).
	Locks lockd.Options
	// RPCBind registers NFS, MOUNT, NLM and NSM with the rpcbind at
	// 127.0.0.1:111 when one answers, and removes them at exit.
	RPCBind bool
	// AdminListen is HOST:PORT of the admin API; empty: off. It needs
	// AdminTokenFile, a file holding the bearer token.
	AdminListen, AdminTokenFile string
	// StateDir and SnapshotDir are the volume registry's directories
	// (volumes.Options).
	StateDir, SnapshotDir string
	// ReadMapBytes bounds the bytes of files mapped to answer READ without
	// a copy (server.Options.ReadMapBytes); 0: READ copies.
	ReadMapBytes int64
	// Version is reported by the admin API's status.
	Version string
	// Metrics, when set, is called once with the server's Prometheus
	// collectors and serves them until its context ends.
	Metrics func(ctx context.Context, cs ...prometheus.Collector)
}

// adminToken reads the admin API's bearer token from c.AdminTokenFile;
// "" when the admin API is off.
func (c *Config) adminToken() (string, error) {
	if c.AdminListen == "" {
		return "", nil
	}
	if c.AdminTokenFile == "" {
		return "", errors.New("--admin-listen needs --admin-token-file: the admin API is never served without a token")
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("admin token file %s is empty", c.AdminTokenFile)
	}
	return token, nil
}

// Run serves cfg until ctx ends, then stops every service and returns
// nil; or returns the first error of a service (the others are stopped),
// or a configuration error before anything is served.
func Run(ctx context.Context, cfg Config) error {
	exps := cfg.Exports
	if len(exps) == 0 {
		exps = []server.Export{{Path: "/"}}
	}
	token, err := cfg.adminToken()
	if err != nil {
		return err
	}
	if cfg.AdminListen != "" {
		for _, e := range exps {
			if e.Path == "/" && len(e.Clients) == 0 {
				klog.InfoS("nfs server: warning: the root is exported to every client; handles obtained through it bypass volume quotas and client lists (restrict it: --export /:CONTROLLER-ADDRESS)")
			}
		}
	}
	if cfg.Locks.GracePeriod < 0 {
		return fmt.Errorf("--grace-period %v: must not be negative", cfg.Locks.GracePeriod)
	}
	if cfg.ReadMapBytes < 0 {
		return fmt.Errorf("--read-map-bytes %d: must not be negative", cfg.ReadMapBytes)
	}
	opts := server.Options{Root: cfg.Root, Exports: exps, Locks: cfg.Locks, ReadMapBytes: cfg.ReadMapBytes}
	if cfg.HandleKeyFile != "" {
		if opts.HandleKey, err = os.ReadFile(cfg.HandleKeyFile); err != nil {
			return err
		}
	}
	reg, err := volumes.New(volumes.Options{Root: cfg.Root, StateDir: cfg.StateDir, SnapshotDir: cfg.SnapshotDir, Version: cfg.Version})
	if err != nil {
		return err
	}
	defer reg.Close()
	opts.Volumes = reg
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Metrics != nil {
		rpcm := metrics.NewRPCServer(nil)
		srv.Dispatcher().SetObserver(rpcm)
		go cfg.Metrics(ctx, rpcm, metrics.NewVolumeCollector(reg.Volumes, nil),
			counters.NewTransportCollector(counters.RoleResponder, srv.RDMAMetrics, nil),
			counters.NewConnectionCollector(srv.RDMAConnections), counters.NewDRCCollector(srv.DRCStats),
			counters.NewReadMapCollector(srv.ReadMapStats))
	}
	errc := make(chan error, 4)
	go func() { errc <- srv.ListenAndServe(ctx, cfg.Listen, cfg.NFSPort, cfg.MountPort) }()
	n := 1
	if cfg.NLMPort >= 0 {
		nlmL, err := net.Listen("tcp", net.JoinHostPort(cfg.Listen, strconv.Itoa(cfg.NLMPort)))
		if err != nil {
			return fmt.Errorf("nlm: %w", err)
		}
		nsmL, err := net.Listen("tcp", net.JoinHostPort(cfg.Listen, strconv.Itoa(cfg.NSMPort)))
		if err != nil {
			nlmL.Close()
			return fmt.Errorf("nsm: %w", err)
		}
		klog.InfoS("nfs server: serving locks", "nlm", nlmL.Addr(), "nsm", nsmL.Addr(), "nsmState", srv.Locks().State(), "grace", srv.Locks().GraceRemaining(), "nsmStateDir", cfg.Locks.StateDir)
		n++
		go func() { errc <- srv.ServeLocks(ctx, nlmL, nsmL) }()
		if cfg.RPCBind {
			claimLockPrograms(ctx, cfg.Locks.NodeCallbacks, portOf(nlmL), portOf(nsmL))
			unregister := registerRPCBind(ctx, cfg.NFSPort, cfg.MountPort, portOf(nlmL), portOf(nsmL))
			defer unregister()
		}
	}
	if cfg.AdminListen != "" {
		h, err := admin.NewHandler(reg, token)
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			return fmt.Errorf("admin API: %w", err)
		}
		n++
		go func() { errc <- serveAdmin(ctx, l, h, cfg.StateDir) }()
	}
	if cfg.RDMAPort > 0 {
		dev := cfg.RDMADevice
		if dev == nil {
			dev = siw.NewDevice(siw.Config{})
		}
		n++
		go func() {
			errc <- srv.ServeRDMA(ctx, dev, net.JoinHostPort(cfg.Listen, strconv.Itoa(cfg.RDMAPort)), cfg.RDMA)
		}()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel() // one service failed: stop the others
		}
	}
	klog.InfoS("nfs server: stopped", "err", first)
	return first
}

// serveAdmin serves the admin API's handler h on l until ctx ends, then
// shuts it down (requests in progress get 5 s to end) and returns nil; or
// returns the error that stopped it.
func serveAdmin(ctx context.Context, l net.Listener, h http.Handler, stateDir string) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		hs.Shutdown(sctx)
	}()
	klog.InfoS("nfs server: serving the admin API", "addr", l.Addr(), "stateDir", stateDir)
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-shut // requests in progress have ended
		return nil
	}
	return err
}
