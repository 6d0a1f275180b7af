package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const testPoll = 20 * time.Millisecond

func TestSysfsDiscoverer(t *testing.T) {
	h := newFakeHost(t)
	h.addDevice("mlx5_1", 1, 1, "1: DOWN", "4: ACTIVE")
	h.addDevice("mlx5_0", 0, 0, "4: ACTIVE")
	h.addDevice("rxe0", -1, -1, "4: ACTIVE") // ib_uverbs shows no node for it
	h.addDevice("mlx5_2", 2, 0, "1: DOWN", "2: INIT")

	devs, err := h.discoverer().Devices()
	if err != nil {
		t.Fatal(err)
	}
	ib := filepath.Join(h.devRoot(), "infiniband")
	want := []Device{
		{Name: "mlx5_0", Health: true, NUMANode: 0,
			Paths: []string{filepath.Join(ib, "uverbs0"), filepath.Join(ib, "rdma_cm")},
			Ports: []Port{{1, "ACTIVE"}}},
		{Name: "mlx5_1", Health: true, NUMANode: 1,
			Paths: []string{filepath.Join(ib, "uverbs1"), filepath.Join(ib, "rdma_cm")},
			Ports: []Port{{1, "DOWN"}, {2, "ACTIVE"}}},
		{Name: "mlx5_2", Health: false, Reason: "no ACTIVE port", NUMANode: 0,
			Paths: []string{filepath.Join(ib, "uverbs2"), filepath.Join(ib, "rdma_cm")},
			Ports: []Port{{1, "DOWN"}, {2, "INIT"}}},
		{Name: "rxe0", Health: false, NUMANode: -1,
			Reason: "no uverbs device in " + filepath.Join(h.sysRoot(), "sys", "class", "infiniband_verbs"),
			Paths:  []string{filepath.Join(ib, "rdma_cm")},
			Ports:  []Port{{1, "ACTIVE"}}},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("Devices() =\n%+v\nwant\n%+v", devs, want)
	}

	// A missing device node makes the device unhealthy.
	if err := os.Remove(filepath.Join(ib, "rdma_cm")); err != nil {
		t.Fatal(err)
	}
	devs, err = h.discoverer().Devices()
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].Health || devs[0].Reason != "missing "+filepath.Join(ib, "rdma_cm") {
		t.Errorf("without rdma_cm: health %v reason %q", devs[0].Health, devs[0].Reason)
	}
}

func TestSysfsDiscovererNoDevices(t *testing.T) {
	// No infiniband class at all (no RDMA driver loaded): empty, no error.
	root := t.TempDir()
	devs, err := NewSysfsDiscoverer(root, filepath.Join(root, "dev")).Devices()
	if err != nil || len(devs) != 0 {
		t.Fatalf("Devices() = %v, %v; want empty, nil", devs, err)
	}
	// An unreadable class path is an error.
	if err := os.MkdirAll(filepath.Join(root, "sys", "class"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sys", "class", "infiniband"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSysfsDiscoverer(root, "").Devices(); err == nil {
		t.Fatal("Devices() with a file as the class directory: no error")
	}
}

// TestSysfsDiscovererRealSystem runs the rdmamap path against this
// machine's /sys, whatever RDMA devices it has (usually none).
func TestSysfsDiscovererRealSystem(t *testing.T) {
	devs, err := NewSysfsDiscoverer("/", "/dev").Devices()
	if err != nil {
		t.Fatal(err)
	}
	if !sort.SliceIsSorted(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name }) {
		t.Errorf("devices not sorted: %v", devs)
	}
	for _, d := range devs {
		t.Logf("found %s health=%v reason=%q paths=%v ports=%v numa=%d", d.Name, d.Health, d.Reason, d.Paths, d.Ports, d.NUMANode)
	}
}

func TestParsePortState(t *testing.T) {
	for in, want := range map[string]string{"4: ACTIVE\n": "ACTIVE", "1: DOWN": "DOWN", "ACTIVE": "ACTIVE", "": ""} {
		if got := parsePortState(in); got != want {
			t.Errorf("parsePortState(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewOptions(t *testing.T) {
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.opts.ResourceName != DefaultResourceName || p.opts.PluginDir != DefaultPluginDir ||
		p.opts.PollInterval != DefaultPollInterval || p.opts.SharesPerDevice != 1 || p.opts.Discoverer == nil {
		t.Errorf("defaults: %+v", p.opts)
	}
	if want := "/var/lib/kubelet/device-plugins/nfsrdma_csi_dev_hca.sock"; p.SocketPath() != want {
		t.Errorf("SocketPath() = %q, want %q", p.SocketPath(), want)
	}
	for _, bad := range []string{"hca", "/hca", "nfsrdma.csi.dev/", "a/b/c"} {
		if _, err := New(Options{ResourceName: bad}); err == nil {
			t.Errorf("New(ResourceName %q): no error", bad)
		}
	}
	if _, err := New(Options{SharesPerDevice: -1}); err == nil {
		t.Error("New(SharesPerDevice -1): no error")
	}
}

func TestPluginRegisterListAndWatchAllocate(t *testing.T) {
	h := newFakeHost(t)
	h.addDevice("mlx5_0", 0, 0, "4: ACTIVE")
	h.addDevice("mlx5_1", 1, 1, "4: ACTIVE")
	dir := t.TempDir()
	regs := make(chan *pluginapi.RegisterRequest, 4)
	startFakeKubelet(t, dir, regs)
	startPlugin(t, Options{ResourceName: "example.com/rdma", PluginDir: dir,
		Discoverer: h.discoverer(), PollInterval: testPoll})

	reg := waitRegistration(t, regs)
	if reg.ResourceName != "example.com/rdma" || reg.Endpoint != "example_com_rdma.sock" ||
		!reg.GetOptions().GetGetPreferredAllocationAvailable() || reg.GetOptions().GetPreStartRequired() {
		t.Fatalf("registration %+v", reg)
	}
	c := dialPlugin(t, dir, reg.Endpoint)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Fatalf("GetDevicePluginOptions = %+v, %v", opts, err)
	}

	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	list := recvList(t, stream, "two healthy devices", func(l []*pluginapi.Device) bool {
		h := healthOf(l)
		return len(h) == 2 && h["mlx5_0"] == pluginapi.Healthy && h["mlx5_1"] == pluginapi.Healthy
	})
	if n := list[1].GetTopology().GetNodes(); len(n) != 1 || n[0].ID != 1 {
		t.Errorf("mlx5_1 topology %v, want NUMA node 1", list[1].GetTopology())
	}

	// The port of mlx5_1 goes down, then up again.
	h.setPortState("mlx5_1", 1, "1: DOWN")
	recvList(t, stream, "mlx5_1 unhealthy", func(l []*pluginapi.Device) bool {
		h := healthOf(l)
		return h["mlx5_0"] == pluginapi.Healthy && h["mlx5_1"] == pluginapi.Unhealthy
	})
	h.setPortState("mlx5_1", 1, "4: ACTIVE")
	recvList(t, stream, "mlx5_1 healthy again", func(l []*pluginapi.Device) bool {
		return healthOf(l)["mlx5_1"] == pluginapi.Healthy
	})

	// Allocate: one container with mlx5_0, one with both (rdma_cm once).
	ib := filepath.Join(h.devRoot(), "infiniband")
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"mlx5_0"}},
		{DevicesIds: []string{"mlx5_0", "mlx5_1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(node string) *pluginapi.DeviceSpec {
		return &pluginapi.DeviceSpec{HostPath: filepath.Join(ib, node), ContainerPath: "/dev/infiniband/" + node, Permissions: "rw"}
	}
	wantSpecs := [][]*pluginapi.DeviceSpec{
		{spec("uverbs0"), spec("rdma_cm")},
		{spec("uverbs0"), spec("rdma_cm"), spec("uverbs1")},
	}
	wantEnv := []string{"mlx5_0", "mlx5_0,mlx5_1"}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("Allocate: %d container responses, want 2", len(resp.ContainerResponses))
	}
	for i, cr := range resp.ContainerResponses {
		if len(cr.Devices) != len(wantSpecs[i]) {
			t.Fatalf("container %d: devices %v, want %v", i, cr.Devices, wantSpecs[i])
		}
		for j := range cr.Devices {
			g, w := cr.Devices[j], wantSpecs[i][j]
			if g.HostPath != w.HostPath || g.ContainerPath != w.ContainerPath || g.Permissions != w.Permissions {
				t.Errorf("container %d device %d = %v, want %v", i, j, g, w)
			}
		}
		if cr.Envs[EnvDevices] != wantEnv[i] {
			t.Errorf("container %d env %s=%q, want %q", i, EnvDevices, cr.Envs[EnvDevices], wantEnv[i])
		}
	}

	// Unknown device: InvalidArgument over gRPC, ErrUnknownDevice in process.
	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"mlx5_0", "mlx5_9"}},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate(unknown) error %v, want InvalidArgument", err)
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"mlx5_9"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("PreStartContainer(unknown) error %v, want InvalidArgument", err)
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"mlx5_1"}}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}

	pref, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"mlx5_1", "mlx5_0"}, MustIncludeDeviceIDs: []string{"mlx5_1"}, AllocationSize: 2},
		{AvailableDeviceIDs: []string{"mlx5_1", "mlx5_0"}, AllocationSize: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := pref.ContainerResponses[0].DeviceIDs; !reflect.DeepEqual(got, []string{"mlx5_1", "mlx5_0"}) {
		t.Errorf("preferred allocation 0 = %v", got)
	}
	if got := pref.ContainerResponses[1].DeviceIDs; !reflect.DeepEqual(got, []string{"mlx5_0"}) {
		t.Errorf("preferred allocation 1 = %v", got)
	}
}

func TestPluginKubeletRestart(t *testing.T) {
	h := newFakeHost(t)
	h.addDevice("mlx5_0", 0, 0, "4: ACTIVE")
	dir := t.TempDir()
	regs := make(chan *pluginapi.RegisterRequest, 4)
	k := startFakeKubelet(t, dir, regs)
	p := startPlugin(t, Options{PluginDir: dir, Discoverer: h.discoverer(), PollInterval: testPoll})
	reg := waitRegistration(t, regs)

	// kubelet goes away: its socket and the plugin's are removed. The
	// plugin serves again and retries registration until kubelet is back.
	k.stop(t)
	time.Sleep(5 * testPoll)
	startFakeKubelet(t, dir, regs)
	reg2 := waitRegistration(t, regs)
	if reg2.Endpoint != reg.Endpoint || reg2.ResourceName != DefaultResourceName {
		t.Fatalf("re-registration %+v, first %+v", reg2, reg)
	}
	if _, err := os.Stat(p.SocketPath()); err != nil {
		t.Fatalf("plugin socket after re-registration: %v", err)
	}
	c := dialPlugin(t, dir, reg2.Endpoint)
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recvList(t, stream, "mlx5_0 healthy", func(l []*pluginapi.Device) bool {
		return healthOf(l)["mlx5_0"] == pluginapi.Healthy
	})

	// kubelet.sock replaced without the plugin socket being removed: the
	// plugin registers again too. (Wait a little first: tmpfs reuses inode
	// numbers and has coarse timestamps, and a real kubelet takes seconds
	// to restart.)
	time.Sleep(5 * testPoll)
	startFakeKubelet(t, dir, regs)
	waitRegistration(t, regs)
}

func TestPluginNoDevices(t *testing.T) {
	h := newFakeHost(t) // no infiniband class directory at all
	dir := t.TempDir()
	regs := make(chan *pluginapi.RegisterRequest, 4)
	startFakeKubelet(t, dir, regs)
	p := startPlugin(t, Options{PluginDir: dir, Discoverer: h.discoverer(), PollInterval: testPoll})
	reg := waitRegistration(t, regs)
	c := dialPlugin(t, dir, reg.Endpoint)
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recvList(t, stream, "an empty list", func(l []*pluginapi.Device) bool { return len(l) == 0 })
	if len(p.Devices()) != 0 {
		t.Fatalf("Devices() = %v", p.Devices())
	}
	// A device appears (driver loaded later).
	h.addDevice("siw0", 0, -1, "4: ACTIVE")
	l := recvList(t, stream, "siw0", func(l []*pluginapi.Device) bool { return healthOf(l)["siw0"] == pluginapi.Healthy })
	if l[0].Topology != nil {
		t.Errorf("topology %v for a device without NUMA node", l[0].Topology)
	}
}

func TestPluginRunWithoutKubeletAndCancel(t *testing.T) {
	h := newFakeHost(t)
	dir := t.TempDir()
	p, err := New(Options{PluginDir: dir, Discoverer: h.discoverer(), PollInterval: testPoll})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(5 * testPoll) // registration fails: no kubelet.sock
	if _, err := os.Stat(p.SocketPath()); err != nil {
		t.Fatalf("plugin socket while waiting for kubelet: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := os.Stat(p.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}

	// A missing plugin directory is an error from Run.
	p, err = New(Options{PluginDir: filepath.Join(dir, "missing"), Discoverer: h.discoverer(), PollInterval: testPoll})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("Run with a missing plugin directory: no error")
	}
}

func TestSharesPerDevice(t *testing.T) {
	h := newFakeHost(t)
	h.addDevice("mlx5_0", 0, 0, "4: ACTIVE")
	h.addDevice("mlx5_1", 1, 0, "1: DOWN")
	p, err := New(Options{Discoverer: h.discoverer(), SharesPerDevice: 3})
	if err != nil {
		t.Fatal(err)
	}
	p.refresh()
	list, _ := p.snapshot()
	var ids []string
	for _, d := range list {
		ids = append(ids, d.ID+"="+d.Health)
	}
	want := []string{"mlx5_0-0=Healthy", "mlx5_0-1=Healthy", "mlx5_0-2=Healthy",
		"mlx5_1-0=Unhealthy", "mlx5_1-1=Unhealthy", "mlx5_1-2=Unhealthy"}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("advertised %v, want %v", ids, want)
	}
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"mlx5_0-1", "mlx5_0-2"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.ContainerResponses[0].Devices); n != 2 || resp.ContainerResponses[0].Envs[EnvDevices] != "mlx5_0" {
		t.Errorf("shares of one device: %v", resp.ContainerResponses[0])
	}
	if _, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"mlx5_0"}},
	}}); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("Allocate(mlx5_0) with shares: %v, want ErrUnknownDevice", err)
	}
	// Preferred: healthy first, spread over devices before doubling up.
	pref, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"mlx5_1-0", "mlx5_1-1", "mlx5_0-2", "mlx5_0-1"}, AllocationSize: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pref.ContainerResponses[0].DeviceIDs, []string{"mlx5_0-1", "mlx5_1-0", "mlx5_0-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("preferred %v, want %v", got, want)
	}
}

// TestPluginDirGoneAndBack: once serving, a plugin directory that vanishes
// for a while is waited for, not fatal.
func TestPluginDirGoneAndBack(t *testing.T) {
	h := newFakeHost(t)
	h.addDevice("mlx5_0", 0, 0, "4: ACTIVE")
	dir := filepath.Join(t.TempDir(), "device-plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	regs := make(chan *pluginapi.RegisterRequest, 4)
	k := startFakeKubelet(t, dir, regs)
	startPlugin(t, Options{PluginDir: dir, Discoverer: h.discoverer(), PollInterval: testPoll})
	waitRegistration(t, regs)
	k.stop(t)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * testPoll)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	startFakeKubelet(t, dir, regs)
	waitRegistration(t, regs)
}
