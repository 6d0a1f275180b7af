package csi

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	mountutils "k8s.io/mount-utils"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// The integration tests run the real binaries: `driver server` (export
// server with its admin API), `driver mounter`, `driver node` and `driver
// controller`, each its own process on loopback, with real FUSE mounts
// over NFS on RPC-over-RDMA (software iWARP). They need root and
// /dev/fuse; without them they skip, except under CI=true.

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDrivers()
	os.Exit(code)
}

// env is one deployment on this machine.
type env struct {
	t                                    *testing.T
	bin, dir                             string
	root, state, token, tokenFile        string
	nfsPort, mountPort, rdmaPort, adminP int
	nodeMetrics, serverMetrics           int
	ctrlSock, nodeSock, mounterSock      string
	targetRoot                           string

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.NeedRootFUSE(t)
	// short paths: unix socket names are limited to 108 bytes
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, bin: testenv.Driver(t, true), dir: dir, procs: map[string]*proc{}}
	e.root = filepath.Join(dir, "export")
	e.state = filepath.Join(dir, "state")
	e.targetRoot = filepath.Join(dir, "kubelet")
	for _, d := range []string{e.root, e.state, e.targetRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.token = "test-token-" + strconv.Itoa(os.Getpid())
	e.tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(e.tokenFile, []byte(e.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.nfsPort, e.mountPort, e.rdmaPort, e.adminP = testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	e.nodeMetrics, e.serverMetrics = testenv.FreePort(t), testenv.FreePort(t)
	e.ctrlSock = filepath.Join(dir, "ctrl.sock")
	e.nodeSock = filepath.Join(dir, "node.sock")
	e.mounterSock = filepath.Join(dir, "mounter.sock")
	t.Cleanup(e.cleanup)
	return e
}

// start runs the driver with args as the named process and waits until
// ready() holds.
func (e *env) start(name string, ready func() bool, args ...string) {
	e.t.Helper()
	log := filepath.Join(e.dir, name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(e.bin, append(args, "--v=2")...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	f.Close()
	p := &proc{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	e.mu.Lock()
	e.procs[name] = p
	e.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-p.done:
			e.t.Fatalf("%s exited: %v\n%s", name, cmd.ProcessState, e.logOf(name))
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s not ready after 60 s\n%s", name, e.logOf(name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the named process with SIGTERM (SIGKILL after 10 s).
func (e *env) stop(name string, sig syscall.Signal) {
	e.mu.Lock()
	p := e.procs[name]
	delete(e.procs, name)
	e.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (e *env) logOf(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func (e *env) startServer() {
	e.start("server", testenv.Dialable("tcp", "127.0.0.1:"+strconv.Itoa(e.adminP)),
		"server", "--root", e.root, "--listen", "127.0.0.1",
		"--nfs-port", strconv.Itoa(e.nfsPort), "--mount-port", strconv.Itoa(e.mountPort),
		"--rdma-port", strconv.Itoa(e.rdmaPort),
		"--admin-listen", "127.0.0.1:"+strconv.Itoa(e.adminP), "--admin-token-file", e.tokenFile,
		"--state-dir", e.state, "--metrics-address", "127.0.0.1:"+strconv.Itoa(e.serverMetrics))
}

func (e *env) startMounter() {
	e.start("mounter", testenv.Dialable("unixpacket", e.mounterSock),
		"mounter", "--socket", e.mounterSock, "--state-dir", filepath.Join(e.dir, "mounts"))
}

func (e *env) startNode() {
	e.start("node", testenv.Dialable("unix", e.nodeSock),
		"node", "--endpoint", "unix://"+e.nodeSock, "--nodeid", "node1", "--node-address", "127.0.0.1",
		"--mounter-socket", e.mounterSock, "--target-root", e.targetRoot, "--unmount-timeout", "2s",
		"--metrics-address", "127.0.0.1:"+strconv.Itoa(e.nodeMetrics))
}

func (e *env) startController() {
	e.start("controller", testenv.Dialable("unix", e.ctrlSock),
		"controller", "--endpoint", "unix://"+e.ctrlSock, "--admin-token-file", e.tokenFile,
		"--admin-port", strconv.Itoa(e.adminP), "--nfs-port", strconv.Itoa(e.nfsPort),
		"--rdma-port", strconv.Itoa(e.rdmaPort), "--mount-port", strconv.Itoa(e.mountPort),
		"--server", "127.0.0.1")
}

// startAll starts the whole deployment.
func (e *env) startAll() {
	e.startServer()
	e.startMounter()
	e.startNode()
	e.startController()
}

// cleanup unmounts whatever is left under the test's directory, stops the
// processes (node and controller first, the server last) and removes the
// directory. A failed test gets the processes' logs.
func (e *env) cleanup() {
	for _, n := range []string{"controller", "node"} {
		e.stop(n, syscall.SIGTERM)
	}
	if mis, err := mountutils.ParseMountInfo("/proc/self/mountinfo"); err == nil {
		for _, mi := range mis {
			if within(mi.MountPoint, e.dir) {
				syscall.Unmount(mi.MountPoint, syscall.MNT_DETACH)
			}
		}
	}
	for _, n := range []string{"mounter", "server"} {
		e.stop(n, syscall.SIGTERM)
	}
	// mount processes of the mounter run in their own sessions: they end
	// once unmounted; give them a moment
	time.Sleep(200 * time.Millisecond)
	if e.t.Failed() {
		for _, n := range []string{"server", "mounter", "node", "controller"} {
			e.t.Logf("---- %s log ----\n%s", n, e.logOf(n))
		}
		ms, _ := filepath.Glob(filepath.Join(e.dir, "mounts", "*.log"))
		for _, m := range ms {
			b, _ := os.ReadFile(m)
			e.t.Logf("---- %s ----\n%s", m, b)
		}
	}
	os.RemoveAll(e.dir)
}

// conn dials a CSI socket.
func (e *env) conn(sock string) *grpc.ClientConn {
	e.t.Helper()
	c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) controller() csipb.ControllerClient {
	return csipb.NewControllerClient(e.conn(e.ctrlSock))
}
func (e *env) node() csipb.NodeClient { return csipb.NewNodeClient(e.conn(e.nodeSock)) }

// scrape returns the text of a /metrics endpoint on loopback.
func scrape(t *testing.T, port int) string {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
