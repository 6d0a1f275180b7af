// Package csi implements the Container Storage Interface services of
// nfsrdma-csi (CSI spec v1.13): Identity, Controller (volumes as
// directories on an export server, quota, per-node export ACLs,
// server-side snapshots and clones) and Node (one FUSE mount per pod,
// served by a mounter process that outlives the node plugin).
package csi

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// DriverName is the CSI driver name registered with Kubernetes.
const DriverName = "nfsrdma.csi.dev"

// Config configures the services one process serves.
type Config struct {
	// Name and Version answer GetPluginInfo.
	Name, Version string
	// Endpoint is where gRPC is served: unix:///path or tcp://host:port.
	Endpoint string

	// Controller: serve the Controller service.
	Controller bool
	// Ports of the export servers the controller manages.
	Ports ServerPorts
	// AdminToken authenticates the controller to export servers' admin
	// API, asked at every request (admin.TokenFile follows a rotated
	// Secret); nil: no admin API, third-party servers only.
	AdminToken admin.TokenSource
	// Servers are export servers known from the start (ListVolumes,
	// ListSnapshots and GetCapacity look there besides the servers seen
	// in CreateVolume).
	Servers []string
	// VolumeHandles, when set, returns the volume handles of this
	// driver's PersistentVolumes (a lister of the cluster's PVs): their
	// servers are known too, so that a restarted controller, or a replica
	// that made none of them, lists every volume in use. An error (the
	// list not synced yet) makes ListVolumes, ListSnapshots and
	// GetCapacity without parameters Unavailable rather than partial.
	VolumeHandles func() ([]string, error)

	// Node: serve the Node service.
	Node bool
	// NodeName and NodeAddress make the node ID "NAME@ADDRESS": the
	// address is what ControllerPublishVolume grants on the export.
	NodeName, NodeAddress string
	// MounterSocket is the mounter's unix socket.
	MounterSocket string
	// KeeperSocket, if not "", is where the node keeps a duplicate of each
	// mount's FUSE connection for the mounter (mounter.Keeper): the
	// mounts survive the death of the mounter's container.
	KeeperSocket string
	// TargetRoot, when set, is the directory every target path must be
	// under (kubelet's /var/lib/kubelet); others are InvalidArgument.
	TargetRoot string
	// UnmountTimeout bounds NodeUnpublishVolume's clean unmount before a
	// lazy one (default 10 s).
	UnmountTimeout time.Duration
	// Kube, when set, is the API client the node reads the credit ledger
	// with (ConfigMap LedgerNamespace/LedgerName): each pod's mount asks
	// for the credits the controller granted it there.
	Kube                        kubernetes.Interface
	LedgerNamespace, LedgerName string
	// LedgerWait bounds the wait for a pod's ledger entry (default 10 s).
	LedgerWait time.Duration
	// Metrics records every CSI call (nil: none).
	Metrics *metrics.CSI
}

// Driver serves the CSI services of Config.
type Driver struct {
	cfg  Config
	ctrl *controller
	node *node
}

// New checks cfg and builds the services.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DriverName
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if !cfg.Controller && !cfg.Node {
		return nil, fmt.Errorf("csi: neither controller nor node service enabled")
	}
	d := &Driver{cfg: cfg}
	if cfg.Controller {
		d.ctrl = newController(cfg)
	}
	if cfg.Node {
		if cfg.NodeName == "" || strings.ContainsAny(cfg.NodeName, "@#,") {
			return nil, fmt.Errorf("csi: node name %q: required, without '@', '#' or ','", cfg.NodeName)
		}
		if net.ParseIP(cfg.NodeAddress) == nil {
			return nil, fmt.Errorf("csi: node address %q: want an IP address", cfg.NodeAddress)
		}
		if cfg.MounterSocket == "" {
			return nil, fmt.Errorf("csi: mounter socket required")
		}
		if cfg.UnmountTimeout == 0 {
			cfg.UnmountTimeout = 10 * time.Second
		}
		d.cfg = cfg
		d.node = newNode(cfg)
	}
	return d, nil
}

// NodeID returns the node ID NodeGetInfo reports: "NAME@ADDRESS".
func (d *Driver) NodeID() string { return d.cfg.NodeName + "@" + d.cfg.NodeAddress }

// Run serves gRPC on the endpoint until ctx ends, then stops gracefully
// (bounded to 5 s).
func (d *Driver) Run(ctx context.Context) error {
	l, err := Listen(d.cfg.Endpoint)
	if err != nil {
		return err
	}
	return d.Serve(ctx, l)
}

// Serve serves gRPC on l until ctx ends.
func (d *Driver) Serve(ctx context.Context, l net.Listener) error {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(logCalls, d.cfg.Metrics.UnaryServerInterceptor()))
	csipb.RegisterIdentityServer(srv, &identity{d: d})
	if d.ctrl != nil {
		csipb.RegisterControllerServer(srv, d.ctrl)
	}
	if d.node != nil {
		csipb.RegisterNodeServer(srv, d.node)
		d.node.start(ctx)
	}
	klog.InfoS("csi: serving", "endpoint", d.cfg.Endpoint, "controller", d.ctrl != nil, "node", d.node != nil, "name", d.cfg.Name, "version", d.cfg.Version)
	go func() {
		<-ctx.Done()
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
	}()
	err := srv.Serve(l)
	if d.ctrl != nil {
		d.ctrl.be.close()
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Listen opens a CSI endpoint: unix:///path (the directory is made, a
// stale socket file removed) or tcp://host:port. Serve serves it; a
// listener opened before Serve queues the connections made meanwhile.
func Listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("csi: endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if u.Host != "" {
			p = filepath.Join(u.Host, p)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("csi: %w", err)
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("csi: remove stale socket: %w", err)
		}
		return net.Listen("unix", p)
	case "tcp":
		return net.Listen("tcp", u.Host)
	}
	return nil, fmt.Errorf("csi: endpoint %q: want unix:///path or tcp://host:port", endpoint)
}

// logCalls logs every call (V(4): requests; errors always), with secrets
// never logged (requests carrying them are not printed).
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	klog.V(4).InfoS("csi: call", "method", info.FullMethod, "request", redact(req))
	resp, err := h(ctx, req)
	if err != nil {
		klog.ErrorS(err, "csi: call failed", "method", info.FullMethod, "took", time.Since(start))
	} else {
		klog.V(3).InfoS("csi: call done", "method", info.FullMethod, "took", time.Since(start))
	}
	return resp, err
}

func redact(req any) any {
	if r, ok := req.(interface{ GetSecrets() map[string]string }); ok && len(r.GetSecrets()) > 0 {
		return "(request with secrets, not logged)"
	}
	return req
}
