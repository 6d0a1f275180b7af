// Package deviceplugin advertises the node's RDMA devices to kubelet through
// the device plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so
// that pods can request them as an extended resource (by default
// nfsrdma.csi.dev/hca) and get the verbs and rdma_cm device nodes in their
// containers.
//
// A Plugin discovers devices with a Discoverer (sysfs through rdmamap on a
// real node, a fake tree in tests), serves the DevicePlugin gRPC service on
// a unix socket in kubelet's device-plugins directory, registers with
// kubelet.sock, polls the devices and pushes health changes to ListAndWatch,
// and serves and registers again when kubelet restarts (kubelet removes the
// sockets of that directory when it starts).
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// DefaultResourceName is the extended resource the plugin advertises
	// unless Options.ResourceName says otherwise.
	DefaultResourceName = "nfsrdma.csi.dev/hca"
	// DefaultPluginDir is kubelet's device plugin directory, which holds
	// kubelet.sock and the plugins' sockets.
	DefaultPluginDir = "/var/lib/kubelet/device-plugins"
	// DefaultPollInterval is how often devices and sockets are checked
	// unless Options.PollInterval says otherwise.
	DefaultPollInterval = 5 * time.Second
	// KubeletSocketName is the name of kubelet's registration socket in the
	// plugin directory.
	KubeletSocketName = "kubelet.sock"
	// ContainerDeviceDir is where device nodes appear inside a container,
	// the directory libibverbs and librdmacm open.
	ContainerDeviceDir = "/dev/infiniband"
	// EnvDevices is the environment variable Allocate sets in the container
	// to the comma-separated names of the allocated RDMA devices.
	EnvDevices = "NFSRDMA_RDMA_DEVICES"

	registerTimeout = 10 * time.Second
)

// ErrUnknownDevice is wrapped by the error of Allocate and PreStartContainer
// for a device ID the plugin does not advertise; over gRPC that error is an
// InvalidArgument status.
var ErrUnknownDevice = errors.New("deviceplugin: unknown device")

// unknownDeviceError names the unknown ID; it unwraps to ErrUnknownDevice
// and converts to a gRPC InvalidArgument status.
type unknownDeviceError struct{ id, resource string }

func (e *unknownDeviceError) Error() string {
	return fmt.Sprintf("%v %q for resource %s", ErrUnknownDevice, e.id, e.resource)
}

func (e *unknownDeviceError) Unwrap() error { return ErrUnknownDevice }

// GRPCStatus lets grpc send the error as codes.InvalidArgument.
func (e *unknownDeviceError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}

// Options configure a Plugin. Zero values select the defaults.
type Options struct {
	// ResourceName is the extended resource name, "<domain>/<name>";
	// default DefaultResourceName.
	ResourceName string
	// PluginDir is kubelet's device plugin directory; default
	// DefaultPluginDir. The plugin's socket and kubelet.sock live there.
	PluginDir string
	// Discoverer finds the devices; default NewSysfsDiscoverer("/", "/dev").
	Discoverer Discoverer
	// PollInterval is how often devices are rediscovered (health changes
	// reach ListAndWatch within one interval) and the sockets checked for a
	// kubelet restart; default DefaultPollInterval.
	PollInterval time.Duration
	// SharesPerDevice is how many pods may hold one RDMA device at a time:
	// each device is advertised as that many device IDs ("mlx5_0" when 1,
	// "mlx5_0-0" ... "mlx5_0-<n-1>" otherwise). RDMA devices are shared
	// safely between processes, so values above 1 are common; default 1.
	SharesPerDevice int
}

// Plugin is a kubelet device plugin for RDMA devices. Create it with New and
// start it with Run; its gRPC methods are called by kubelet.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	opts          Options
	socketName    string // in PluginDir
	socketPath    string
	kubeletSocket string

	mu      sync.Mutex
	devices []Device          // last discovery, sorted by Name
	byID    map[string]Device // advertised ID -> device
	list    []*pluginapi.Device
	changed chan struct{} // closed and replaced when list changes
}

// New checks opts, fills in defaults and returns a Plugin that has not yet
// discovered anything. It fails when ResourceName is not of the form
// "<domain>/<name>" or SharesPerDevice is negative.
func New(opts Options) (*Plugin, error) {
	if opts.ResourceName == "" {
		opts.ResourceName = DefaultResourceName
	}
	domain, name, ok := strings.Cut(opts.ResourceName, "/")
	if !ok || domain == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("deviceplugin: resource name %q is not <domain>/<name>", opts.ResourceName)
	}
	if opts.PluginDir == "" {
		opts.PluginDir = DefaultPluginDir
	}
	if opts.Discoverer == nil {
		opts.Discoverer = NewSysfsDiscoverer("/", "/dev")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.SharesPerDevice < 0 {
		return nil, fmt.Errorf("deviceplugin: SharesPerDevice %d is negative", opts.SharesPerDevice)
	}
	if opts.SharesPerDevice == 0 {
		opts.SharesPerDevice = 1
	}
	sock := strings.NewReplacer("/", "_", ".", "_").Replace(opts.ResourceName) + ".sock"
	return &Plugin{
		opts:          opts,
		socketName:    sock,
		socketPath:    filepath.Join(opts.PluginDir, sock),
		kubeletSocket: filepath.Join(opts.PluginDir, KubeletSocketName),
		byID:          map[string]Device{},
		changed:       make(chan struct{}),
	}, nil
}

// SocketPath returns the unix socket the plugin serves on while running:
// <PluginDir>/<resource name with '/' and '.' replaced by '_'>.sock.
func (p *Plugin) SocketPath() string { return p.socketPath }

// Devices returns the devices found by the last discovery, sorted by name.
func (p *Plugin) Devices() []Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Device(nil), p.devices...)
}

// Run discovers the devices, serves the DevicePlugin service on SocketPath
// and registers with kubelet, then every PollInterval rediscovers devices
// (pushing changes to ListAndWatch streams), retries a failed registration,
// and when its socket has been removed (kubelet restarted) or kubelet.sock
// replaced, serves again and re-registers. It returns nil when ctx is done,
// after stopping the server and removing its socket, and an error only when
// the socket cannot be created at the start (e.g. PluginDir missing or not
// writable); later failures to serve are logged and retried every
// PollInterval.
func (p *Plugin) Run(ctx context.Context) error {
	p.refresh()
	ticker := time.NewTicker(p.opts.PollInterval)
	defer ticker.Stop()
	failures := 0 // registration attempts failed in a row
	for first := true; ; first = false {
		srv, sockInfo, serveErr, err := p.serve()
		if err != nil {
			if first {
				return err
			}
			// Serving worked before: wait for the directory to come
			// back rather than end the plugin.
			klog.ErrorS(err, "Device plugin cannot serve; retrying", "socket", p.socketPath, "retryIn", p.opts.PollInterval)
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
			}
			p.refresh()
			continue
		}
		registered := false
		var kubeletInfo fs.FileInfo
		restart := false
		for !restart {
			if !registered {
				// Stat before registering: a kubelet.sock replaced
				// after this is seen at the next poll.
				kubeletInfo, _ = os.Stat(p.kubeletSocket)
				if err := p.register(ctx); err != nil {
					// Once per outage at error level; kubelet may be
					// down for a while.
					failures++
					if failures == 1 {
						klog.ErrorS(err, "Device plugin registration with kubelet failed; retrying",
							"resource", p.opts.ResourceName, "kubeletSocket", p.kubeletSocket, "retryEvery", p.opts.PollInterval)
					} else {
						klog.V(4).InfoS("Device plugin registration failed again", "err", err, "attempts", failures)
					}
				} else {
					registered = true
					failures = 0
					klog.InfoS("Device plugin registered with kubelet",
						"resource", p.opts.ResourceName, "socket", p.socketPath, "devices", len(p.Devices()))
				}
			}
			select {
			case <-ctx.Done():
				srv.Stop()
				p.removeSocket(sockInfo)
				return nil
			case err := <-serveErr:
				klog.ErrorS(err, "Device plugin gRPC server stopped; serving again", "socket", p.socketPath)
				restart = true
				continue
			case <-ticker.C:
			}
			p.refresh()
			if fi, err := os.Stat(p.socketPath); err != nil || !sameSocket(fi, sockInfo) {
				klog.InfoS("Device plugin socket removed (kubelet restarted?); serving and registering again",
					"socket", p.socketPath)
				restart = true
				continue
			}
			if registered {
				fi, err := os.Stat(p.kubeletSocket)
				if err != nil || !sameSocket(fi, kubeletInfo) {
					klog.InfoS("kubelet socket replaced; registering again", "kubeletSocket", p.kubeletSocket)
					registered = false
				}
			}
		}
		srv.Stop()
		p.removeSocket(sockInfo)
	}
}

// serve listens on the plugin socket (removing a stale one) and serves the
// DevicePlugin service in a goroutine whose end is reported on serveErr.
func (p *Plugin) serve() (*grpc.Server, fs.FileInfo, <-chan error, error) {
	if err := os.Remove(p.socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("deviceplugin: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", p.socketPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("deviceplugin: listen: %w", err)
	}
	info, err := os.Stat(p.socketPath)
	if err != nil {
		lis.Close()
		return nil, nil, nil, fmt.Errorf("deviceplugin: stat socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	serveErr := make(chan error, 1)
	go func() {
		if err := srv.Serve(lis); err != nil {
			serveErr <- err
		}
	}()
	klog.V(2).InfoS("Device plugin serving", "socket", p.socketPath)
	return srv, info, serveErr, nil
}

// removeSocket removes the plugin socket if it is still the one created
// for info (kubelet may have replaced the directory's content).
func (p *Plugin) removeSocket(info fs.FileInfo) {
	if fi, err := os.Stat(p.socketPath); err == nil && sameSocket(fi, info) {
		_ = os.Remove(p.socketPath)
	}
}

// sameSocket reports whether two stats are of the same socket file. Inode
// numbers are reused at once on tmpfs, so the modification time (set when
// the socket is bound) is compared too.
func sameSocket(a, b fs.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// register calls kubelet's Registration service for this plugin.
func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.kubeletSocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("deviceplugin: dial kubelet: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.socketName,
		ResourceName: p.opts.ResourceName,
		Options:      p.options(),
	})
	if err != nil {
		return fmt.Errorf("deviceplugin: register %s: %w", p.opts.ResourceName, err)
	}
	return nil
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// refresh rediscovers devices and, when the advertised list changed, wakes
// the ListAndWatch streams. A discovery error keeps the previous state.
func (p *Plugin) refresh() {
	devs, err := p.opts.Discoverer.Devices()
	if err != nil {
		klog.ErrorS(err, "RDMA device discovery failed; keeping the previous device list")
		return
	}
	byID := make(map[string]Device, len(devs)*p.opts.SharesPerDevice)
	list := make([]*pluginapi.Device, 0, len(devs)*p.opts.SharesPerDevice)
	for _, d := range devs {
		health := pluginapi.Unhealthy
		if d.Health {
			health = pluginapi.Healthy
		}
		var topo *pluginapi.TopologyInfo
		if d.NUMANode >= 0 {
			topo = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
		for i := 0; i < p.opts.SharesPerDevice; i++ {
			id := d.Name
			if p.opts.SharesPerDevice > 1 {
				id += "-" + strconv.Itoa(i)
			}
			byID[id] = d
			list = append(list, &pluginapi.Device{ID: id, Health: health, Topology: topo})
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.devices
	p.devices = devs
	p.byID = byID
	if sameList(p.list, list) && p.list != nil {
		return
	}
	logChanges(old, devs)
	p.list = list
	close(p.changed)
	p.changed = make(chan struct{})
}

func sameList(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Health != b[i].Health ||
			a[i].GetTopology().String() != b[i].GetTopology().String() {
			return false
		}
	}
	return true
}

func logChanges(old, cur []Device) {
	prev := make(map[string]Device, len(old))
	for _, d := range old {
		prev[d.Name] = d
	}
	for _, d := range cur {
		o, seen := prev[d.Name]
		delete(prev, d.Name)
		if seen && o.Health == d.Health {
			continue
		}
		klog.InfoS("RDMA device", "device", d.Name, "healthy", d.Health, "reason", d.Reason, "paths", d.Paths)
	}
	for name := range prev {
		klog.InfoS("RDMA device gone", "device", name)
	}
}

// snapshot returns the advertised list and the channel closed on its next
// change.
func (p *Plugin) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list, p.changed
}

// GetDevicePluginOptions implements the DevicePlugin service: no
// PreStartContainer, GetPreferredAllocation available.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch implements the DevicePlugin service: it sends the device
// list (possibly empty) at once and again after every change of a device's
// presence, health or topology, until the stream or the server ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		list, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: list}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Allocate implements the DevicePlugin service: for each container it
// returns a DeviceSpec (permissions "rw") per device node of the requested
// devices, each node once, with the host path from Device.Paths and the
// container path /dev/infiniband/<node>, and sets EnvDevices to the device
// names. An ID the plugin does not advertise fails the whole request with
// an error wrapping ErrUnknownDevice (codes.InvalidArgument over gRPC).
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	byID := p.byID
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.GetContainerRequests() {
		cresp := &pluginapi.ContainerAllocateResponse{}
		seenPath := map[string]bool{}
		seenName := map[string]bool{}
		var names []string
		for _, id := range creq.GetDevicesIds() {
			d, ok := byID[id]
			if !ok {
				return nil, &unknownDeviceError{id: id, resource: p.opts.ResourceName}
			}
			if !seenName[d.Name] {
				seenName[d.Name] = true
				names = append(names, d.Name)
			}
			for _, hp := range d.Paths {
				if seenPath[hp] {
					continue
				}
				seenPath[hp] = true
				cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
					HostPath:      hp,
					ContainerPath: ContainerDeviceDir + "/" + filepath.Base(hp),
					Permissions:   "rw",
				})
			}
		}
		if len(names) > 0 {
			cresp.Envs = map[string]string{EnvDevices: strings.Join(names, ",")}
		}
		klog.V(2).InfoS("Allocate", "resource", p.opts.ResourceName, "ids", creq.GetDevicesIds(), "devices", names)
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// GetPreferredAllocation implements the DevicePlugin service: for each
// container it returns the must-include IDs followed by available IDs,
// healthy ones first and then spreading over distinct devices, in name
// order, up to AllocationSize IDs.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.mu.Lock()
	byID := p.byID
	p.mu.Unlock()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, creq := range req.GetContainerRequests() {
		size := int(creq.GetAllocationSize())
		chosen := []string{}
		taken := map[string]bool{}
		usedDev := map[string]bool{}
		take := func(id string) {
			if len(chosen) < size && !taken[id] {
				taken[id] = true
				chosen = append(chosen, id)
				usedDev[byID[id].Name] = true
			}
		}
		for _, id := range creq.GetMustIncludeDeviceIDs() {
			take(id)
		}
		avail := append([]string(nil), creq.GetAvailableDeviceIDs()...)
		sort.SliceStable(avail, func(i, j int) bool {
			hi, hj := byID[avail[i]].Health, byID[avail[j]].Health
			if hi != hj {
				return hi
			}
			return avail[i] < avail[j]
		})
		// First one ID per device not yet used, then the rest.
		for _, id := range avail {
			if !usedDev[byID[id].Name] {
				take(id)
			}
		}
		for _, id := range avail {
			take(id)
		}
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

// PreStartContainer implements the DevicePlugin service. The plugin does not
// ask for it (PreStartRequired is false); a call checks the IDs and does
// nothing else, failing for an unknown ID as Allocate does.
func (p *Plugin) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	byID := p.byID
	p.mu.Unlock()
	for _, id := range req.GetDevicesIds() {
		if _, ok := byID[id]; !ok {
			return nil, &unknownDeviceError{id: id, resource: p.opts.ResourceName}
		}
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}
