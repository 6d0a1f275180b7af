// Package registration registers a CSI node plugin with kubelet's plugin
// watcher, as node-driver-registrar does, from inside the plugin's own
// process: it serves the Registration gRPC service of
// k8s.io/kubelet/pkg/apis/pluginregistration/v1 on a unix socket
// "<driver>-reg.sock" in kubelet's plugins_registry directory. Kubelet
// notices the socket (inotify), calls GetInfo (plugin type CSIPlugin, the
// driver's name, the path of its CSI socket as kubelet sees it, the CSI
// versions it speaks), calls NodeGetInfo on that CSI socket, records the
// driver in the node's CSINode object and reports the outcome with
// NotifyRegistrationStatus. Removing the socket unregisters the driver.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	// DefaultDir is kubelet's plugin registration directory
	// (<kubelet root>/plugins_registry), watched by its plugin watcher.
	DefaultDir = "/var/lib/kubelet/plugins_registry"
	// DefaultCheckInterval is how often Run checks that its socket is
	// still there, unless Options.CheckInterval says otherwise.
	DefaultCheckInterval = 10 * time.Second

	stopTimeout = 2 * time.Second
)

// quietWarning is how long after publishing its socket Run logs that
// kubelet has not registered the plugin (a variable for tests).
var quietWarning = time.Minute

// SupportedVersions are the CSI spec versions GetInfo reports; kubelet
// accepts a CSI plugin only with a 1.x version.
var SupportedVersions = []string{"1.0.0"}

// ErrNotRegistered is wrapped by the error Run returns when kubelet reports
// that it could not register the plugin (NotifyRegistrationStatus with
// PluginRegistered false). The process is expected to exit and be
// restarted, as node-driver-registrar does, which registers it again.
var ErrNotRegistered = errors.New("registration: kubelet did not register the plugin")

// Options configure a Registrar.
type Options struct {
	// DriverName is the CSI driver name, e.g. "nfsrdma.csi.dev"; the
	// socket is "<DriverName>-reg.sock". Required.
	DriverName string
	// Endpoint is the absolute path of the plugin's CSI unix socket as
	// kubelet sees it on the host (node-driver-registrar's
	// --kubelet-registration-path), e.g.
	// /var/lib/kubelet/plugins/nfsrdma.csi.dev/csi.sock. Required.
	Endpoint string
	// Dir is the plugin registration directory as this process sees it;
	// default DefaultDir. It must exist.
	Dir string
	// CheckInterval is how often Run checks that the socket is still
	// there, and makes it again when it was removed; default
	// DefaultCheckInterval.
	CheckInterval time.Duration
}

// Registrar serves kubelet's Registration service for one CSI driver.
// Create it with New and run it with Run.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	opts Options
	path string

	mu         sync.Mutex
	registered bool
	failed     chan error // buffered: the first rejection
}

// New checks opts, fills in defaults and returns a Registrar that serves
// nothing yet. It fails when DriverName is empty or holds a '/', or
// Endpoint is not an absolute path.
func New(opts Options) (*Registrar, error) {
	if opts.DriverName == "" || strings.ContainsAny(opts.DriverName, "/\x00") {
		return nil, fmt.Errorf("registration: driver name %q: required, without '/'", opts.DriverName)
	}
	if !filepath.IsAbs(opts.Endpoint) {
		return nil, fmt.Errorf("registration: endpoint %q: want the absolute path of the CSI socket as kubelet sees it", opts.Endpoint)
	}
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	return &Registrar{opts: opts, path: filepath.Join(opts.Dir, opts.DriverName+"-reg.sock"),
		failed: make(chan error, 1)}, nil
}

// SocketPath returns the path of the registration socket:
// <Dir>/<DriverName>-reg.sock.
func (r *Registrar) SocketPath() string { return r.path }

// Registered reports whether kubelet's last NotifyRegistrationStatus said
// the plugin is registered.
func (r *Registrar) Registered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.registered
}

// GetInfo answers kubelet's plugin watcher: a CSIPlugin named DriverName
// whose CSI socket is Endpoint, speaking SupportedVersions.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.V(2).InfoS("registration: kubelet asked for the plugin info", "name", r.opts.DriverName, "endpoint", r.opts.Endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.opts.DriverName,
		Endpoint:          r.opts.Endpoint,
		SupportedVersions: SupportedVersions,
	}, nil
}

// NotifyRegistrationStatus records kubelet's verdict. A rejection is
// logged and makes Run return an error wrapping ErrNotRegistered.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	r.registered = s.PluginRegistered
	r.mu.Unlock()
	if s.PluginRegistered {
		klog.InfoS("registration: kubelet registered the plugin", "name", r.opts.DriverName, "endpoint", r.opts.Endpoint)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	err := fmt.Errorf("%w %s: %s", ErrNotRegistered, r.opts.DriverName, s.Error)
	klog.ErrorS(err, "registration: kubelet rejected the plugin", "endpoint", r.opts.Endpoint)
	select {
	case r.failed <- err:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Run publishes the registration socket and serves it until ctx ends
// (then it returns nil) or kubelet rejects the plugin (then it returns an
// error wrapping ErrNotRegistered). A stale socket at SocketPath is
// replaced; a file there that is not a socket is an error. Every
// CheckInterval the socket is made again if it was removed (kubelet then
// registers the plugin again). On return the socket is removed, unless it
// is no longer the one Run made (another instance has published its own).
func (r *Registrar) Run(ctx context.Context) error {
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	defer stopGracefully(srv)

	pub, err := r.publish(srv)
	if err != nil {
		return err
	}
	defer func() { pub.remove() }()
	klog.InfoS("registration: serving kubelet's plugin watcher", "socket", r.path, "name", r.opts.DriverName, "endpoint", r.opts.Endpoint)

	tick := time.NewTicker(r.opts.CheckInterval)
	defer tick.Stop()
	quiet := time.NewTimer(quietWarning)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-r.failed:
			return err
		case <-quiet.C:
			if !r.Registered() {
				klog.InfoS("registration: kubelet has not registered the plugin yet; is the registration directory kubelet's <root-dir>/plugins_registry, and is kubelet running?",
					"socket", r.path, "waited", quietWarning)
			}
		case <-tick.C:
			if _, err := os.Lstat(r.path); !errors.Is(err, os.ErrNotExist) {
				continue // ours, or another instance's: left alone
			}
			klog.InfoS("registration: socket removed; publishing it again", "socket", r.path)
			pub.listener.Close()
			next, err := r.publish(srv)
			if err != nil {
				return err
			}
			pub = next
		}
	}
}

// published is one listener of the registration socket and the identity
// (device, inode) of the file it is bound to.
type published struct {
	path       string
	listener   net.Listener
	dev, inode uint64
}

// publish removes a stale socket at the socket path (anything else there
// is an error), binds a new one there, makes it mode 0600 and serves it
// with srv. The socket is bound under its own name at once, as
// node-driver-registrar binds it: kubelet's plugin watcher stats every
// file created in the directory and logs an error for one that is gone
// by then, so a temporary name renamed into place would cost an error
// line in kubelet's log at every start.
func (r *Registrar) publish(srv *grpc.Server) (*published, error) {
	if fi, err := os.Lstat(r.path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("registration: %s exists and is not a socket", r.path)
		}
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("registration: remove stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", r.path)
	if err != nil {
		return nil, fmt.Errorf("registration: %w", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // remove checks the file is still ours
	var st syscall.Stat_t
	if err = os.Chmod(r.path, 0o600); err == nil {
		err = syscall.Lstat(r.path, &st)
	}
	if err != nil {
		l.Close()
		_ = os.Remove(r.path)
		return nil, fmt.Errorf("registration: %w", err)
	}
	go func() { _ = srv.Serve(l) }()
	return &published{path: r.path, listener: l, dev: uint64(st.Dev), inode: st.Ino}, nil
}

// inPlace reports whether the file at the socket path is still the socket
// p bound.
func (p *published) inPlace() bool {
	var st syscall.Stat_t
	return syscall.Lstat(p.path, &st) == nil && uint64(st.Dev) == p.dev && st.Ino == p.inode
}

// remove closes the listener and removes the socket file if it is still
// the one p bound (another instance may have published its own since).
func (p *published) remove() {
	p.listener.Close()
	if p.inPlace() {
		if err := os.Remove(p.path); err != nil {
			klog.ErrorS(err, "registration: removing the socket")
		}
	}
}

// stopGracefully stops srv after the calls in progress (the
// NotifyRegistrationStatus that ended Run gets its answer), waiting at
// most stopTimeout for them.
func stopGracefully(srv *grpc.Server) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		srv.Stop()
	}
}
