package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeHost is a fake sysfs and /dev tree laid out as the kernel does:
//
//	sys/devices/pci0000:00/0000:00:0N.0/{numa_node, infiniband/<dev>/{ports/<p>/state, device -> PCI dir},
//	                                     infiniband_verbs/uverbs<k>/{ibdev, dev}}
//	sys/class/infiniband/<dev>        -> ../../devices/.../infiniband/<dev>
//	sys/class/infiniband_verbs/uverbs<k> -> ../../devices/.../infiniband_verbs/uverbs<k>
//	sys/class/infiniband_verbs/abi_version
//	dev/infiniband/uverbs<k>, dev/infiniband/rdma_cm
type fakeHost struct {
	t    *testing.T
	root string
	mu   sync.Mutex
	pci  map[string]string // device name -> PCI device dir
	next int
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	return &fakeHost{t: t, root: t.TempDir(), pci: map[string]string{}}
}

func (h *fakeHost) sysRoot() string { return h.root }
func (h *fakeHost) devRoot() string { return filepath.Join(h.root, "dev") }

func (h *fakeHost) discoverer() *SysfsDiscoverer {
	return NewSysfsDiscoverer(h.sysRoot(), h.devRoot())
}

func (h *fakeHost) write(path, content string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	// Write to a temporary name and rename, as a reader polling
	// concurrently must never see a truncated file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) symlink(target, link string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		h.t.Fatal(err)
	}
}

// addDevice adds RDMA device name with verbs node uverbs<uverbs> (none when
// uverbs < 0), NUMA node numa and one port per state ("4: ACTIVE", "1: DOWN").
func (h *fakeHost) addDevice(name string, uverbs, numa int, portStates ...string) {
	h.t.Helper()
	h.mu.Lock()
	h.next++
	pciName := fmt.Sprintf("0000:00:%02x.0", h.next+2)
	h.mu.Unlock()
	pciRel := filepath.Join("devices", "pci0000:00", pciName)
	pciDir := filepath.Join(h.root, "sys", pciRel)
	h.pci[name] = pciDir
	h.write(filepath.Join(pciDir, "numa_node"), fmt.Sprintf("%d\n", numa))
	ibDir := filepath.Join(pciDir, "infiniband", name)
	h.write(filepath.Join(ibDir, "node_guid"), "0c42:a103:0065:4a3e\n")
	for i, st := range portStates {
		h.write(filepath.Join(ibDir, "ports", fmt.Sprint(i+1), "state"), st+"\n")
		h.write(filepath.Join(ibDir, "ports", fmt.Sprint(i+1), "phys_state"), "5: LinkUp\n")
	}
	h.symlink(filepath.Join("..", "..", "..", pciName), filepath.Join(ibDir, "device"))
	h.symlink(filepath.Join("..", "..", pciRel, "infiniband", name),
		filepath.Join(h.root, "sys", "class", "infiniband", name))
	if uverbs >= 0 {
		uv := fmt.Sprintf("uverbs%d", uverbs)
		uvDir := filepath.Join(pciDir, "infiniband_verbs", uv)
		h.write(filepath.Join(uvDir, "ibdev"), name+"\n")
		h.write(filepath.Join(uvDir, "dev"), fmt.Sprintf("231:%d\n", 192+uverbs))
		h.symlink(filepath.Join("..", "..", pciRel, "infiniband_verbs", uv),
			filepath.Join(h.root, "sys", "class", "infiniband_verbs", uv))
		h.write(filepath.Join(h.root, "sys", "class", "infiniband_verbs", "abi_version"), "6\n")
		h.write(filepath.Join(h.devRoot(), "infiniband", uv), "")
	}
	h.write(filepath.Join(h.devRoot(), "infiniband", "rdma_cm"), "")
}

// setPortState rewrites ports/<port>/state of device name.
func (h *fakeHost) setPortState(name string, port int, state string) {
	h.t.Helper()
	h.write(filepath.Join(h.pci[name], "infiniband", name, "ports", fmt.Sprint(port), "state"), state+"\n")
}

// fakeKubelet serves the real Registration service on <dir>/kubelet.sock
// and records the requests. stop behaves as a kubelet shutting down and
// starting again does to the directory: kubelet.sock and every plugin
// socket are removed.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func startFakeKubelet(t *testing.T, dir string, regs chan *pluginapi.RegisterRequest) *fakeKubelet {
	t.Helper()
	sock := filepath.Join(dir, KubeletSocketName)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{dir: dir, srv: grpc.NewServer(), regs: regs}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	if strings.Contains(req.Endpoint, "/") {
		return nil, fmt.Errorf("endpoint %q is not a socket name in %s", req.Endpoint, k.dir)
	}
	k.regs <- req
	return &pluginapi.Empty{}, nil
}

// stop stops serving and cleans the directory as a restarting kubelet does.
func (k *fakeKubelet) stop(t *testing.T) {
	t.Helper()
	k.srv.Stop()
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dialPlugin connects to the plugin endpoint named in a registration.
func dialPlugin(t *testing.T, dir, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// startPlugin runs a plugin until the test ends and checks that Run returns
// nil once cancelled.
func startPlugin(t *testing.T, opts Options) *Plugin {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return p
}

func waitRegistration(t *testing.T, regs <-chan *pluginapi.RegisterRequest) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-regs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no registration with the fake kubelet within 10s")
		return nil
	}
}

// recvList receives ListAndWatch responses until one satisfies ok.
func recvList(t *testing.T, stream grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse],
	what string, ok func([]*pluginapi.Device) bool) []*pluginapi.Device {
	t.Helper()
	type result struct {
		resp *pluginapi.ListAndWatchResponse
		err  error
	}
	deadline := time.After(10 * time.Second)
	for {
		ch := make(chan result, 1)
		go func() {
			r, err := stream.Recv()
			ch <- result{r, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("ListAndWatch waiting for %s: %v", what, r.err)
			}
			if ok(r.resp.Devices) {
				return r.resp.Devices
			}
		case <-deadline:
			t.Fatalf("ListAndWatch: no list with %s within 10s", what)
		}
	}
}

func healthOf(list []*pluginapi.Device) map[string]string {
	m := map[string]string{}
	for _, d := range list {
		m[d.ID] = d.Health
	}
	return m
}
