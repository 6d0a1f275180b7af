package registration

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	testDriver   = "nfsrdma.csi.dev"
	testEndpoint = "/var/lib/kubelet/plugins/nfsrdma.csi.dev/csi.sock"
)

// kubeletClient dials the registration socket as kubelet's plugin watcher
// does (pkg/kubelet/pluginmanager/operationexecutor: a plain unix-socket
// gRPC connection, no TLS) and returns the Registration client.
func kubeletClient(t *testing.T, path string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

// start runs a Registrar in dir until the test ends; it returns the
// Registrar, a function that stops it and returns Run's result, and waits
// for the socket to appear.
func start(t *testing.T, opts Options) (*Registrar, func() error) {
	t.Helper()
	if opts.DriverName == "" {
		opts.DriverName = testDriver
	}
	if opts.Endpoint == "" {
		opts.Endpoint = testEndpoint
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return 10 s after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { cancel() })
	waitSocket(t, r.SocketPath(), done)
	return r, stop
}

// waitSocket waits up to 5 s until a socket accepting connections is at
// path, failing the test if Run returns first.
func waitSocket(t *testing.T, path string, done chan error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("Run returned before the socket appeared: %v", err)
		default:
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no socket at %s after 5 s", path)
}

func callCtx(t *testing.T) context.Context {
	return testenv.Context(t, 5*time.Second)
}

// TestRegistrationAsKubeletSeesIt drives the socket as kubelet does:
// GetInfo gives a CSIPlugin with the driver's name, the kubelet-side CSI
// socket path and version 1.0.0; NotifyRegistrationStatus(true) is
// recorded; the socket is mode 0600, no temporary file is left, and the
// socket is gone when Run returns.
func TestRegistrationAsKubeletSeesIt(t *testing.T) {
	dir := t.TempDir()
	r, stop := start(t, Options{Dir: dir})
	if want := filepath.Join(dir, testDriver+"-reg.sock"); r.SocketPath() != want {
		t.Fatalf("SocketPath %q, want %q", r.SocketPath(), want)
	}
	fi, err := os.Lstat(r.SocketPath())
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v, %v", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("registration dir holds %d files, want the socket only: %v", len(ents), ents)
	}

	c := kubeletClient(t, r.SocketPath())
	info, err := c.GetInfo(callCtx(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != testDriver || info.Endpoint != testEndpoint ||
		!reflect.DeepEqual(info.SupportedVersions, []string{"1.0.0"}) {
		t.Fatalf("GetInfo = %+v", info)
	}
	if r.Registered() {
		t.Fatal("registered before kubelet said so")
	}
	if _, err := c.NotifyRegistrationStatus(callCtx(t), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if !r.Registered() {
		t.Fatal("Registered() false after NotifyRegistrationStatus(true)")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(r.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Run returned: %v", err)
	}
}

// TestRejectionEndsRun: NotifyRegistrationStatus(false) makes Run return
// ErrNotRegistered with kubelet's error text, and the socket is removed.
func TestRejectionEndsRun(t *testing.T) {
	r, err := New(Options{DriverName: testDriver, Endpoint: testEndpoint, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitSocket(t, r.SocketPath(), done)
	c := kubeletClient(t, r.SocketPath())
	if _, err := c.NotifyRegistrationStatus(callCtx(t), &registerapi.RegistrationStatus{
		PluginRegistered: false, Error: "plugin validation failed"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), "plugin validation failed") {
			t.Fatalf("Run = %v, want ErrNotRegistered with kubelet's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after kubelet rejected the plugin")
	}
	if r.Registered() {
		t.Error("Registered() true after a rejection")
	}
	if _, err := os.Lstat(r.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after a rejection: %v", err)
	}
}

// staleSocket leaves a socket file nobody listens on at path, as a killed
// plugin leaves it.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := net.Dial("unix", path); err == nil {
		t.Fatal("stale socket still answers")
	}
}

// TestStaleSocketReplaced: a dead socket left at the path is replaced by
// one that answers; a file there that is not a socket is an error and is
// left alone.
func TestStaleSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, testDriver+"-reg.sock")
	staleSocket(t, path)
	r, stop := start(t, Options{Dir: dir})
	if _, err := kubeletClient(t, path).GetInfo(callCtx(t), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo over the replaced socket: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Run over a regular file = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "not a socket" {
		t.Fatalf("regular file changed: %q", b)
	}
}

// TestSocketPublishedAgain: a removed socket is made again within a check
// interval (kubelet registers the plugin again); a socket another instance
// put in its place is neither replaced nor removed at shutdown.
func TestSocketPublishedAgain(t *testing.T) {
	dir := t.TempDir()
	r, stop := start(t, Options{Dir: dir, CheckInterval: 20 * time.Millisecond})
	if err := os.Remove(r.SocketPath()); err != nil {
		t.Fatal(err)
	}
	waitSocket(t, r.SocketPath(), make(chan error))
	if _, err := kubeletClient(t, r.SocketPath()).GetInfo(callCtx(t), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo over the socket made again: %v", err)
	}

	// Another instance's socket (a new pod's) takes the path.
	if err := os.Remove(r.SocketPath()); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", r.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var before syscall.Stat_t
	if err := syscall.Lstat(r.SocketPath(), &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several check intervals
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	if err := syscall.Lstat(r.SocketPath(), &after); err != nil || after.Ino != before.Ino {
		t.Fatalf("another instance's socket was replaced or removed (%v)", err)
	}
}

func TestNewChecksOptions(t *testing.T) {
	for _, o := range []Options{
		{DriverName: "", Endpoint: testEndpoint},
		{DriverName: "a/b", Endpoint: testEndpoint},
		{DriverName: testDriver, Endpoint: ""},
		{DriverName: testDriver, Endpoint: "csi.sock"},
		{DriverName: testDriver, Endpoint: "unix:///csi/csi.sock"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
	r, err := New(Options{DriverName: testDriver, Endpoint: testEndpoint})
	if err != nil || r.SocketPath() != "/var/lib/kubelet/plugins_registry/nfsrdma.csi.dev-reg.sock" {
		t.Fatalf("defaults: %v %v", r, err)
	}
}

// TestQuietKubeletLogged: when kubelet has not registered the plugin a
// while after the socket appeared, Run says so in its log (a wrong
// --plugin-registration-dir or a stopped kubelet); once registered it
// does not.
func TestQuietKubeletLogged(t *testing.T) {
	old := quietWarning
	quietWarning = 50 * time.Millisecond
	defer func() { quietWarning = old }()
	buf := testenv.CaptureKlog(t, 0)

	_, stop := start(t, Options{Dir: t.TempDir()})
	warned := testenv.WaitFor(5*time.Second, func() bool {
		klog.Flush()
		return strings.Contains(buf.String(), "kubelet has not registered the plugin yet")
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !warned {
		t.Fatalf("no warning in the log after 5 s:\n%s", buf.String())
	}

	buf.Reset()
	r, stop := start(t, Options{Dir: t.TempDir()})
	if _, err := kubeletClient(t, r.SocketPath()).NotifyRegistrationStatus(callCtx(t), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	klog.Flush()
	if strings.Contains(buf.String(), "not registered the plugin yet") {
		t.Fatalf("warning although registered:\n%s", buf.String())
	}
}
