package plugin

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/deviceplugin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/nodecert"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/registration"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
)

// NodeConfig says how RunNode runs.
type NodeConfig struct {
	// Version is the driver's version (GetPluginInfo, the API user agent).
	Version string
	// CSI is the node service's configuration (endpoint, node name and
	// address, mounter socket, target root...); Version, Node and, with
	// the ledger, Kube and the ledger's names are set by RunNode. An
	// empty NodeAddress is the first global unicast IPv4 address, else
	// 127.0.0.1.
	CSI csi.Config
	// Kube locates the Kubernetes API; CreditLedger reads each pod's
	// credit grant from the ledger ConfigMap there.
	Kube         Kube
	CreditLedger bool
	// DevicePlugin advertises the node's RDMA devices to kubelet
	// (device-plugin API) with DevicePluginOptions.
	DevicePlugin        bool
	DevicePluginOptions deviceplugin.Options
	// Registration registers the plugin with kubelet's plugin watcher,
	// in place of the node-driver-registrar sidecar.
	Registration Registration
	// EnableFUSEURing turns on FUSE over io_uring in the kernel (the fuse
	// module's enable_uring, which needs a privileged container), so that
	// mounts with fuse_uring=auto or on can use it; a failure is logged.
	EnableFUSEURing bool
	// MetricsAddress (with each pod's mount metrics) and HealthAddress
	// are HOST:PORT of /metrics and /healthz ("": off).
	MetricsAddress, HealthAddress string
	// NodeCertFile, if not "", is kept holding this node's RPC-with-TLS
	// certificate and key (nodecert.Requester, through the Kubernetes
	// API), for the mounter to give its mounts as --tls-cert and
	// --tls-key; NodeCertValidity, if not 0, is the lifetime asked for.
	NodeCertFile     string
	NodeCertValidity time.Duration
}

// Registration selects the node plugin's own registration with kubelet's
// plugin watcher (node-driver-registrar's flags).
type Registration struct {
	Enabled bool
	// Path is the CSI socket's path as kubelet sees it on the host;
	// "": the path of the unix endpoint.
	Path string
	// Dir is kubelet's plugin registration directory as this process
	// sees it (registration.DefaultDir).
	Dir string
}

// options returns the Registrar's options for the CSI endpoint: the
// registration path defaults to the endpoint's own unix socket path.
func (r Registration) options(endpoint string) (registration.Options, error) {
	path := r.Path
	if path == "" {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "unix" {
			return registration.Options{}, fmt.Errorf("--kubelet-registration-path is required with endpoint %q (kubelet reaches CSI plugins over unix sockets only)", endpoint)
		}
		path = filepath.Join("/", u.Host, u.Path)
	}
	return registration.Options{DriverName: csi.DriverName, Endpoint: path, Dir: r.Dir}, nil
}

// RunNode serves the CSI Identity and Node services on cfg.CSI.Endpoint
// until ctx ends (or kubelet rejects the registration). Errors: the
// endpoint's, the device plugin's setup, the registration's.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	version := cfg.Version
	c := cfg.CSI
	c.Version, c.Node = version, true
	if c.NodeAddress == "" {
		c.NodeAddress = defaultAddress()
		klog.InfoS("node: --node-address not set; using a local address", "address", c.NodeAddress)
	}
	if cfg.CreditLedger {
		k, err := cfg.Kube.client(version)
		if err != nil {
			klog.InfoS("node: no Kubernetes API: mounts use the StorageClass credits, not the ledger's", "err", err)
		} else {
			c.Kube, c.LedgerNamespace, c.LedgerName = k, cfg.Kube.Namespace, credits.DefaultName
		}
	}
	if cfg.NodeCertFile != "" {
		k, err := cfg.Kube.client(version)
		if err != nil {
			return fmt.Errorf("node: --node-cert needs the Kubernetes API: %w", err)
		}
		r := &nodecert.Requester{Client: k, NodeName: c.NodeName, File: cfg.NodeCertFile, Validity: cfg.NodeCertValidity}
		go func() {
			if err := r.Run(ctx); err != nil {
				klog.ErrorS(err, "node: node certificate requester stopped")
			}
		}()
	}
	if cfg.EnableFUSEURing {
		if err := enableFUSEURing(fuseURingParam); err != nil {
			klog.InfoS("node: FUSE over io_uring not enabled: mounts with fuse_uring=auto use /dev/fuse, fuse_uring=on fails", "err", err)
		} else {
			klog.InfoS("node: FUSE over io_uring enabled", "param", fuseURingParam)
		}
	}
	cm := metrics.NewCSI(nil)
	c.Metrics = cm
	d, err := csi.New(c)
	if err != nil {
		return err
	}
	mc := metrics.NewMountCollector(func(ctx context.Context) ([]metrics.MountTarget, error) {
		ms, err := (&mounter.Client{Socket: c.MounterSocket}).List(ctx)
		var ts []metrics.MountTarget
		for _, m := range ms {
			if m.MetricsSocket != "" {
				ts = append(ts, metrics.MountTarget{Socket: m.MetricsSocket,
					Labels: prometheus.Labels{"volume": m.VolumeID, "pod": m.PodUID}})
			}
		}
		return ts, err
	})
	if cfg.DevicePlugin {
		p, err := deviceplugin.New(cfg.DevicePluginOptions)
		if err != nil {
			return err
		}
		go func() {
			if err := p.Run(ctx); err != nil {
				klog.ErrorS(err, "node: device plugin stopped")
			}
		}()
	}
	go serveMetrics(ctx, cfg.MetricsAddress, metrics.NewProcessRegistry(cm, mc))
	go serveHealth(ctx, cfg.HealthAddress, c.Endpoint)
	l, err := csi.Listen(c.Endpoint)
	if err != nil {
		return err
	}
	if !cfg.Registration.Enabled {
		return d.Serve(ctx, l)
	}
	return serveRegistered(ctx, d, l, cfg.Registration, c.Endpoint)
}

// serveRegistered serves the CSI services on l and registers them with
// kubelet until ctx ends. It returns when either stops: a rejection by
// kubelet ends the process with an error, so that it is restarted and
// registers again, as node-driver-registrar does.
func serveRegistered(ctx context.Context, d *csi.Driver, l net.Listener, r Registration, endpoint string) error {
	opts, err := r.options(endpoint)
	if err != nil {
		l.Close()
		return err
	}
	reg, err := registration.New(opts)
	if err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The CSI socket is bound before kubelet can learn of it: its
	// NodeGetInfo during registration waits in the listen backlog.
	served, registered := make(chan error, 1), make(chan error, 1)
	go func() { served <- d.Serve(ctx, l) }()
	go func() { registered <- reg.Run(ctx) }()
	select {
	case err := <-registered:
		cancel()
		serveErr := <-served
		if err != nil {
			return err
		}
		return serveErr
	case err := <-served:
		cancel()
		if regErr := <-registered; err == nil {
			err = regErr
		}
		return err
	}
}

// defaultAddress returns the first global unicast IPv4 address, else
// 127.0.0.1.
func defaultAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
