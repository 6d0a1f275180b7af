package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestMain removes the driver binary the process tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDrivers()
	os.Exit(code)
}

// process is a driver subcommand running as its own process.
type process struct {
	cmd  *exec.Cmd
	out  *testenv.Buffer
	done chan error
}

// startDriver runs the driver binary with args; the test's cleanup kills
// it if it still runs and logs its output on failure.
func startDriver(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(testenv.Driver(t, false), args...), out: &testenv.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("driver %s output:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// wait returns the process's exit error, failing the test after 10 s.
func (p *process) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("driver still running 10 s later:\n%s", p.out.String())
		return nil
	}
}

// unixConn dials a unix socket as kubelet does (no TLS).
func unixConn(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// nodeEnv is the directories and sockets of one `driver node` run.
type nodeEnv struct {
	dir, regDir, csiSock, mounterSock, regSock, healthAddr string
}

func newNodeEnv(t *testing.T) nodeEnv {
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "reg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := nodeEnv{dir: dir, regDir: filepath.Join(dir, "plugins_registry"), csiSock: filepath.Join(dir, "plugin", "csi.sock"),
		mounterSock: filepath.Join(dir, "mounter.sock"), healthAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	e.regSock = filepath.Join(e.regDir, "nfsrdma.csi.dev-reg.sock")
	if err := os.Mkdir(e.regDir, 0o750); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e nodeEnv) nodeArgs(extra ...string) []string {
	return append([]string{"node", "--endpoint=unix://" + e.csiSock, "--nodeid=node-1", "--node-address=127.0.0.1",
		"--mounter-socket=" + e.mounterSock, "--credit-ledger=false", "--target-root=" + e.dir,
		"--register-with-kubelet", "--plugin-registration-dir=" + e.regDir, "--health-address=" + e.healthAddr}, extra...)
}

// TestNodeRegistersWithKubelet starts `driver mounter` and `driver node
// --register-with-kubelet --health-address` as processes and does what
// kubelet does: it finds the registration socket, calls GetInfo (a
// CSIPlugin named nfsrdma.csi.dev whose endpoint is the
// --kubelet-registration-path), calls NodeGetInfo on the CSI socket,
// reports success and probes /healthz, which fails once the mounter is
// gone. SIGTERM ends the node plugin with status 0 and removes the socket;
// a rejection by kubelet ends it with status 1 and removes the socket.
func TestNodeRegistersWithKubelet(t *testing.T) {
	e := newNodeEnv(t)
	mounter := startDriver(t, "mounter", "--socket="+e.mounterSock, "--state-dir="+filepath.Join(e.dir, "state"))
	testenv.Eventually(t, 10*time.Second, "mounter socket", testenv.Dialable("unixpacket", e.mounterSock))

	// A stale registration socket from an earlier run.
	l, err := net.Listen("unix", e.regSock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	// without a keeper, the plugin's health is its mounter's (with one it
	// stays live: node.probe)
	node := startDriver(t, e.nodeArgs("--keeper-socket=none")...)
	testenv.Eventually(t, 10*time.Second, "registration socket", testenv.Dialable("unix", e.regSock))
	reg := registerapi.NewRegistrationClient(unixConn(t, e.regSock))
	ctx := testenv.Context(t, 30*time.Second)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Without --kubelet-registration-path the endpoint is --endpoint's path.
	if info.Type != registerapi.CSIPlugin || info.Name != "nfsrdma.csi.dev" || info.Endpoint != e.csiSock ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
	ni, err := csipb.NewNodeClient(unixConn(t, info.Endpoint)).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.NodeId != "node-1@127.0.0.1" {
		t.Fatalf("NodeGetInfo over the registered endpoint: %v, %v", ni, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "registration logged", func() bool { return strings.Contains(node.out.String(), "kubelet registered the plugin") })

	if code := healthz(t, e.healthAddr); code != http.StatusOK {
		t.Fatalf("/healthz with the mounter running: %d", code)
	}
	if err := mounter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := mounter.wait(t); err != nil {
		t.Fatalf("mounter: %v", err)
	}
	if code := healthz(t, e.healthAddr); code != http.StatusInternalServerError {
		t.Fatalf("/healthz without the mounter: %d, want 500", code)
	}

	if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := node.wait(t); err != nil {
		t.Fatalf("node after SIGTERM: %v", err)
	}
	if _, err := os.Lstat(e.regSock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("registration socket left after SIGTERM: %v", err)
	}

	// Kubelet rejects the plugin: the process exits with status 1 (to be
	// restarted), the socket removed.
	node = startDriver(t, e.nodeArgs("--kubelet-registration-path=/var/lib/kubelet/plugins/nfsrdma.csi.dev/csi.sock")...)
	testenv.Eventually(t, 10*time.Second, "registration socket", testenv.Dialable("unix", e.regSock))
	reg = registerapi.NewRegistrationClient(unixConn(t, e.regSock))
	if info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil || info.Endpoint != "/var/lib/kubelet/plugins/nfsrdma.csi.dev/csi.sock" {
		t.Fatalf("GetInfo with --kubelet-registration-path: %+v, %v", info, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "no such driver"}); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := node.wait(t); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("node after a rejection: %v, want exit status 1", err)
	}
	if !strings.Contains(node.out.String(), "no such driver") {
		t.Errorf("kubelet's error not logged:\n%s", node.out.String())
	}
	if _, err := os.Lstat(e.regSock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("registration socket left after a rejection: %v", err)
	}
}

// TestNodeRegistrationArgs: a TCP endpoint needs --kubelet-registration-path
// (kubelet dials CSI plugins over unix sockets only).
func TestNodeRegistrationArgs(t *testing.T) {
	e := newNodeEnv(t)
	_, err := execute(t, testenv.Context(t, 30*time.Second), "node", "--endpoint=tcp://127.0.0.1:0", "--nodeid=node-1", "--node-address=127.0.0.1",
		"--mounter-socket="+e.mounterSock, "--credit-ledger=false", "--register-with-kubelet", "--plugin-registration-dir="+e.regDir)
	if err == nil || !strings.Contains(err.Error(), "--kubelet-registration-path is required") {
		t.Fatalf("tcp endpoint without --kubelet-registration-path: %v", err)
	}
}

// TestControllerHealthAddress: `driver controller --health-address`
// serves /healthz from its own Probe (no export server known: ready), in
// place of the livenessprobe sidecar, and stops with the process.
func TestControllerHealthAddress(t *testing.T) {
	e := newNodeEnv(t)
	p := startDriver(t, "controller", "--endpoint=unix://"+e.csiSock, "--credit-ledger=false", "--health-address="+e.healthAddr)
	testenv.Eventually(t, 10*time.Second, "health endpoint", testenv.Dialable("tcp", e.healthAddr))
	if code := healthz(t, e.healthAddr); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("controller after SIGTERM: %v", err)
	}
	if testenv.Dialable("tcp", e.healthAddr)() {
		t.Fatal("health endpoint still answers after the controller ended")
	}
}
