// Package exportd is the one assembly of the export server, used by
// `driver server`, the demo and every test that needs a server: the
// volume registry (package volumes), the NFSv3 and MOUNT v3 protocol
// server (package server) handed its listeners over TCP and
// RPC-over-RDMA, the NLM v4 and NSM v1 lock services (package lockd)
// with their rpcbind registrations, the metrics and the admin API
// (package admin) over the registry. New opens them (or takes the
// listeners the caller opened); Serve runs them until the context ends
// or one of them fails; Run does both.
package exportd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
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
	// Exports is the static export table; empty: none (only the volumes
	// the admin API registers are exported, each to the nodes granted).
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
	// AdminToken is the bearer token itself, in place of AdminTokenFile.
	AdminToken string
	// TLS offers RPC-with-TLS (RFC 9289) on NFS, MOUNT, NLM and NSM over
	// TCP (server.Options.TLS): the server's certificate and the
	// authorities of the nodes' certificates. Nil: plaintext only.
	TLS *tls.Config
	// TLSRequired requires RPC-with-TLS with a node certificate on NFS,
	// MOUNT and NLM over TCP and grants volumes by certificate name only
	// (server.Options.TLSRequired). NFS over RDMA cannot carry TLS: it
	// needs RDMAPort 0.
	TLSRequired bool
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
	// Listeners are sockets the caller opened, served in place of those
	// Listen and the ports name; Serve (or Close) closes them.
	Listeners Listeners
}

// Listeners are the TCP sockets of an export server. A nil one is opened
// from Config.Listen and its port (NLM and NSM: unless NLMPort < 0;
// admin: AdminListen, unless empty).
type Listeners struct {
	NFS, Mount, NLM, NSM, Admin net.Listener
}

// Ports are the ports an export server listens on; 0: not served.
type Ports struct {
	NFS, Mount, RDMA, NLM, NSM, Admin int
}

// adminToken returns the admin API's token source: AdminToken, else the
// file AdminTokenFile, read again whenever it changes (admin.TokenFile);
// nil when the admin API is off.
func (c *Config) adminToken() (admin.TokenSource, error) {
	if c.AdminListen == "" && c.Listeners.Admin == nil {
		return nil, nil
	}
	if c.AdminToken != "" {
		return admin.StaticToken(c.AdminToken), nil
	}
	if c.AdminTokenFile == "" {
		return nil, errors.New("--admin-listen needs --admin-token-file: the admin API is never served without a token")
	}
	return admin.NewTokenFile(c.AdminTokenFile)
}

// Server is an export server whose listeners are open, before or while
// it serves.
type Server struct {
	cfg   Config
	token admin.TokenSource // nil: no admin API
	reg   *volumes.Registry
	srv   *server.Server
	ls    Listeners
	rdma  *rpcrdma.Server // nil: NFS/RDMA off
	dev   verbs.Device
}

// Run serves cfg until ctx ends, then stops every service and returns
// nil; or returns the first error of a service (the others are stopped),
// or a configuration error before anything is served (New, Serve).
func Run(ctx context.Context, cfg Config) error {
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// New checks cfg, opens the volume registry, makes the protocol server and
// opens the listeners cfg does not carry: NFS, MOUNT, NLM, NSM and the
// admin API over TCP, NFS over RPC-over-RDMA (RFC 8267) on cfg.RDMADevice
// when cfg.RDMAPort > 0. On error, everything opened is closed, the
// listeners of cfg.Listeners too.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	s := &Server{cfg: cfg, ls: cfg.Listeners}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	exps := cfg.Exports
	if s.token, err = cfg.adminToken(); err != nil {
		return nil, err
	}
	for _, e := range exps {
		if e.Path != "/" || (e.ExplicitClients && len(e.Clients)+len(e.ReadOnlyClients) == 0) {
			continue
		}
		if len(e.Clients)+len(e.ReadOnlyClients) == 0 {
			klog.InfoS("nfs server: warning: the root is exported to every client; it holds every volume, and handles obtained through it bypass volume quotas and client lists", "rootSquash", e.RootSquash)
		} else {
			klog.InfoS("nfs server: the root is exported; it holds every volume, and handles obtained through it bypass volume quotas and client lists",
				"clients", e.Clients, "readOnlyClients", e.ReadOnlyClients, "rootSquash", e.RootSquash)
		}
		if cfg.HandleKeyFile == "" {
			klog.InfoS("nfs server: warning: the root is exported without --handle-key-file: give the server a handle key of its own (the default key is derived from the root directory)")
		}
	}
	if cfg.Locks.GracePeriod < 0 {
		return nil, fmt.Errorf("--grace-period %v: must not be negative", cfg.Locks.GracePeriod)
	}
	if cfg.ReadMapBytes < 0 {
		return nil, fmt.Errorf("--read-map-bytes %d: must not be negative", cfg.ReadMapBytes)
	}
	if cfg.TLSRequired && cfg.TLS == nil {
		return nil, errors.New("--tls=required needs --tls-cert and --tls-key (and --tls-client-ca, the authority of the nodes' certificates)")
	}
	if cfg.TLSRequired && cfg.RDMAPort != 0 {
		return nil, errors.New("--tls=required: NFS over RDMA cannot carry RPC-with-TLS (RFC 9289 defines it for TCP; RDMA traffic bypasses the host's TCP stack), so a node on it would be known by its address alone: serve it with --rdma-port 0, or use --tls=optional")
	}
	opts := server.Options{Root: cfg.Root, Exports: exps, Locks: cfg.Locks, ReadMapBytes: cfg.ReadMapBytes,
		TLS: cfg.TLS, TLSRequired: cfg.TLSRequired}
	if cfg.HandleKeyFile != "" {
		if opts.HandleKey, err = os.ReadFile(cfg.HandleKeyFile); err != nil {
			return nil, err
		}
	}
	if s.reg, err = volumes.New(volumes.Options{Root: cfg.Root, StateDir: cfg.StateDir, SnapshotDir: cfg.SnapshotDir, Version: cfg.Version}); err != nil {
		return nil, err
	}
	opts.Volumes = s.reg
	if s.srv, err = server.New(opts); err != nil {
		return nil, err
	}
	listen := func(l *net.Listener, what string, port int) error {
		if *l != nil {
			return nil
		}
		var err error
		if *l, err = net.Listen("tcp", net.JoinHostPort(cfg.Listen, strconv.Itoa(port))); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := listen(&s.ls.NFS, "nfs server", cfg.NFSPort); err != nil {
		return nil, err
	}
	if err := listen(&s.ls.Mount, "nfs server", cfg.MountPort); err != nil {
		return nil, err
	}
	if cfg.NLMPort >= 0 {
		if err := listen(&s.ls.NLM, "nlm", cfg.NLMPort); err != nil {
			return nil, err
		}
		if err := listen(&s.ls.NSM, "nsm", cfg.NSMPort); err != nil {
			return nil, err
		}
	}
	if s.ls.Admin == nil && cfg.AdminListen != "" {
		if s.ls.Admin, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			return nil, fmt.Errorf("admin API: %w", err)
		}
	}
	if cfg.RDMAPort > 0 {
		s.dev = cfg.RDMADevice
		if s.dev == nil {
			s.dev = siw.NewDevice(siw.Config{})
		}
		ro := cfg.RDMA
		if ro.Logger == nil {
			ro.Logger = s.srv.Logger()
		}
		addr := net.JoinHostPort(cfg.Listen, strconv.Itoa(cfg.RDMAPort))
		if s.rdma, err = rpcrdma.Listen(ctx, s.dev, addr, ro); err != nil {
			return nil, fmt.Errorf("nfs server: NFS/RDMA on %s: %w", addr, err)
		}
	}
	return s, nil
}

// Protocol returns the protocol server (its dispatcher, lock manager,
// counters and RDMA connections).
func (s *Server) Protocol() *server.Server { return s.srv }

// Registry returns the volume registry.
func (s *Server) Registry() *volumes.Registry { return s.reg }

// RDMA returns the NFS/RDMA listener; nil when NFS/RDMA is off.
func (s *Server) RDMA() *rpcrdma.Server { return s.rdma }

// Ports returns the ports listened on.
func (s *Server) Ports() Ports {
	p := Ports{NFS: portOf(s.ls.NFS), Mount: portOf(s.ls.Mount), NLM: portOf(s.ls.NLM), NSM: portOf(s.ls.NSM), Admin: portOf(s.ls.Admin)}
	if s.rdma != nil {
		p.RDMA = portOf(s.rdma)
	}
	return p
}

// Close closes what New opened, for a Server that is not served (Serve
// closes everything when it returns).
func (s *Server) Close() error {
	for _, l := range []net.Listener{s.ls.NFS, s.ls.Mount, s.ls.NLM, s.ls.NSM, s.ls.Admin} {
		if l != nil {
			l.Close()
		}
	}
	if s.rdma != nil {
		s.rdma.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	if s.reg != nil {
		s.reg.Close()
	}
	return nil
}

// Serve serves every service until ctx ends, then stops them, closes the
// server and returns nil; or returns the first error of a service (the
// others are stopped).
func (s *Server) Serve(ctx context.Context) error {
	defer s.Close()
	cfg, srv, reg := s.cfg, s.srv, s.reg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Metrics != nil {
		rpcm := metrics.NewRPCServer(nil)
		srv.Dispatcher().SetObserver(rpcm)
		go cfg.Metrics(ctx, rpcm, metrics.NewVolumeCollector(reg.Volumes, nil),
			counters.NewTransportCollector(counters.RoleResponder, srv.RDMAMetrics, nil),
			counters.NewConnectionCollector(srv.RDMAConnections), counters.NewDRCCollector(srv.DRCStats),
			counters.NewReadMapCollector(srv.ReadMapStats), counters.NewFileCacheCollector(srv.FileCacheStats))
	}
	errc := make(chan error, 4)
	klog.InfoS("nfs server: serving", "root", cfg.Root, "nfs", s.ls.NFS.Addr(), "mount", s.ls.Mount.Addr(), "exports", len(srv.Exports()))
	go func() { errc <- srv.Serve(ctx, s.ls.NFS, s.ls.Mount) }()
	n := 1
	if s.ls.NLM != nil || s.ls.NSM != nil {
		klog.InfoS("nfs server: serving locks", "nlm", addrOf(s.ls.NLM), "nsm", addrOf(s.ls.NSM), "nsmState", srv.Locks().State(), "grace", srv.Locks().GraceRemaining(), "nsmStateDir", cfg.Locks.StateDir)
		n++
		go func() { errc <- srv.ServeLocks(ctx, s.ls.NLM, s.ls.NSM) }()
		if cfg.RPCBind {
			claimLockPrograms(ctx, cfg.Locks.NodeCallbacks, portOf(s.ls.NLM), portOf(s.ls.NSM))
			unregister := registerRPCBind(ctx, portOf(s.ls.NFS), portOf(s.ls.Mount), portOf(s.ls.NLM), portOf(s.ls.NSM))
			defer unregister()
		}
	}
	if s.ls.Admin != nil {
		h, err := admin.NewTokenHandler(reg, s.token)
		if err != nil {
			cancel()
			for range n {
				<-errc
			}
			return err
		}
		n++
		go func() { errc <- serveAdmin(ctx, s.ls.Admin, h, cfg.StateDir) }()
	}
	if s.rdma != nil {
		klog.InfoS("nfs server: NFS/RDMA device", "addr", s.rdma.Addr(), "device", s.dev.Name(), "transport", s.dev.Transport())
		n++
		go func() { errc <- srv.ServeRDMA(ctx, s.rdma) }()
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
