package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/health"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/registration"
)

// registrationFlags select the node plugin's own registration with
// kubelet's plugin watcher, in place of the node-driver-registrar sidecar
// (whose flag names they follow).
type registrationFlags struct {
	enabled   bool
	path, dir string
}

func (r *registrationFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&r.enabled, "register-with-kubelet", false, "register with kubelet's plugin watcher from this process (a socket in --plugin-registration-dir), in place of the node-driver-registrar sidecar")
	f.StringVar(&r.path, "kubelet-registration-path", "", "path of the CSI socket as kubelet sees it on the host, e.g. /var/lib/kubelet/plugins/"+csi.DriverName+"/csi.sock (default: the path of --endpoint)")
	f.StringVar(&r.dir, "plugin-registration-dir", registration.DefaultDir, "kubelet's plugin registration directory (<kubelet root>/plugins_registry) as this process sees it")
}

// options returns the Registrar's options for the CSI endpoint: the
// registration path defaults to the endpoint's own unix socket path.
func (r *registrationFlags) options(endpoint string) (registration.Options, error) {
	path := r.path
	if path == "" {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "unix" {
			return registration.Options{}, fmt.Errorf("--kubelet-registration-path is required with endpoint %q (kubelet reaches CSI plugins over unix sockets only)", endpoint)
		}
		path = filepath.Join("/", u.Host, u.Path)
	}
	return registration.Options{DriverName: csi.DriverName, Endpoint: path, Dir: r.dir}, nil
}

// serveRegistered serves the CSI services on l and registers them with
// kubelet until ctx ends. It returns when either stops: a rejection by
// kubelet ends the process with an error, so that it is restarted and
// registers again, as node-driver-registrar does.
func serveRegistered(ctx context.Context, d *csi.Driver, l net.Listener, r *registrationFlags, endpoint string) error {
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

// serveHealth serves /healthz on addr for the plugin at the CSI endpoint
// until ctx ends ("" = off); a failure is logged, never fatal.
func serveHealth(ctx context.Context, addr, endpoint string) {
	if err := health.Serve(ctx, addr, endpoint, health.DefaultProbeTimeout); err != nil {
		klog.ErrorS(err, "health: stopped", "address", addr)
	}
}
