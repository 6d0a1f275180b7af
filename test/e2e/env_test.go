//go:build e2e

package e2e

import (
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"

	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// env is the deployment under test: the export server and the controller
// (our binary), the two sidecars, and clients of the cluster and of the
// export server's admin API.
type env struct {
	t          *testing.T
	kubeconfig string
	k8sBin     string // kubectl, csi-provisioner, csi-attacher
	kcache     string // KUBECACHEDIR for kubectl
	cs         kubernetes.Interface

	dir                               string
	bin                               string // cmd/driver
	root, state, token, tokenFile     string
	nfsPort, mountPort, rdmaPort, adm int
	ctrlSock                          string
	admin                             *admin.Client

	mu    sync.Mutex
	procs map[string]*proc
	order []string
}

type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// newEnv checks the prerequisites (skip without KUBECONFIG unless
// CI=true), builds the driver and makes the working directory.
func newEnv(t *testing.T) *env {
	t.Helper()
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KUBECONFIG is not set (hack/test-k8s starts a control plane and sets it)")
		}
		t.Skip("KUBECONFIG is not set: run hack/test-k8s (it builds and starts a control plane)")
	}
	e := &env{t: t, kubeconfig: kc, procs: map[string]*proc{}}
	e.k8sBin = os.Getenv("K8S_BIN")
	for _, b := range []string{"kubectl", "csi-provisioner", "csi-attacher"} {
		if e.k8sBin != "" {
			if _, err := os.Stat(filepath.Join(e.k8sBin, b)); err != nil {
				t.Fatalf("K8S_BIN=%s: %v", e.k8sBin, err)
			}
			continue
		}
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not in PATH and K8S_BIN not set (hack/test-k8s sets it)", b)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kc, err)
	}
	cfg.Timeout = 30 * time.Second
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}

	// short paths: unix socket names are limited to 108 bytes
	if e.dir, err = os.MkdirTemp("", "e2e"); err != nil {
		t.Fatal(err)
	}
	e.kcache = filepath.Join(e.dir, "kubecache")
	if v := os.Getenv("KUBECACHEDIR"); v != "" {
		e.kcache = v
	}
	e.root = filepath.Join(e.dir, "export")
	e.state = filepath.Join(e.dir, "state")
	for _, d := range []string{e.root, e.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.token = "e2e-token-" + strconv.Itoa(os.Getpid())
	e.tokenFile = filepath.Join(e.dir, "token")
	if err := os.WriteFile(e.tokenFile, []byte(e.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.nfsPort, e.mountPort, e.rdmaPort, e.adm = testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	e.ctrlSock = filepath.Join(e.dir, "ctrl.sock")
	e.admin = admin.NewClient("http://127.0.0.1:"+strconv.Itoa(e.adm), e.token, nil)
	e.bin = testenv.Driver(t, false)
	return e
}

// path of a control-plane binary.
func (e *env) k8s(name string) string {
	if e.k8sBin != "" {
		return filepath.Join(e.k8sBin, name)
	}
	return name
}

// start runs path with args as the named process, its output in
// DIR/NAME.log, and waits until ready() holds (nil: still running after a
// second).
func (e *env) start(name string, ready func() bool, path string, args ...string) {
	e.t.Helper()
	log := filepath.Join(e.dir, name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	// no orphans when the test binary dies without its cleanup (go test
	// -timeout, a signal)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	f.Close()
	p := &proc{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	e.mu.Lock()
	e.procs[name] = p
	e.order = append(e.order, name)
	e.mu.Unlock()
	e.t.Logf("started %s (pid %d): %s %s", name, cmd.Process.Pid, filepath.Base(path), strings.Join(args, " "))
	if ready == nil {
		select {
		case <-p.done:
			e.t.Fatalf("%s exited at once: %v\n%s", name, cmd.ProcessState, e.logOf(name))
		case <-time.After(time.Second):
		}
		return
	}
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
		time.Sleep(100 * time.Millisecond)
	}
}

// alive fails the test when a process we started has exited.
func (e *env) alive(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.order {
		if p := e.procs[n]; p != nil {
			select {
			case <-p.done:
				t.Fatalf("%s exited: %v\n%s", n, p.cmd.ProcessState, e.logOf(n))
			default:
			}
		}
	}
}

// stop ends the named process with SIGTERM (SIGKILL after 10 s).
func (e *env) stop(name string) {
	e.mu.Lock()
	p := e.procs[name]
	delete(e.procs, name)
	e.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// logLines returns the lines of the named process's log containing every
// one of subs.
func (e *env) logLines(name string, subs ...string) []string {
	b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok && l != "" {
			out = append(out, l)
		}
	}
	return out
}

// logOf returns the tail of the named process's log: its last 80 lines,
// each cut at 400 bytes (the sidecars log whole objects at --v=4); the
// whole log stays in the test's directory, kept when the test fails.
func (e *env) logOf(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	const maxLines, maxLine = 80, 400
	var out []string
	if len(lines) > maxLines {
		out = append(out, fmt.Sprintf("[... %d lines before]", len(lines)-maxLines))
		lines = lines[len(lines)-maxLines:]
	}
	for _, l := range lines {
		if len(l) > maxLine {
			l = l[:maxLine] + " [...]"
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// kubectl runs kubectl with args and logs the command and its output (the
// test log shows each state); it returns the output.
func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.k8s("kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "KUBECACHEDIR="+e.kcache)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s := strings.TrimRight(out.String(), "\n")
	if err != nil {
		t.Logf("$ kubectl %s\n%s\n(kubectl: %v)", strings.Join(args, " "), s, err)
	} else {
		t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), s)
	}
	return s
}

// waitFor polls cond every 500 ms until it holds, fails the test after d
// with what and cond's last description.
func waitFor(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	t0 := time.Now()
	last := ""
	for {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		ok, desc, err := cond(cctx)
		ccancel()
		if err != nil {
			desc = fmt.Sprintf("%s (error: %v)", desc, err)
		}
		if desc != "" {
			last = desc
		}
		if ok && err == nil {
			t.Logf("%s: after %v", what, time.Since(t0).Round(100*time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached after %v; last state: %s", what, d, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *env) startServer() {
	e.start("server", testenv.Dialable("tcp", "127.0.0.1:"+strconv.Itoa(e.adm)), e.bin,
		"server", "--root", e.root, "--listen", "127.0.0.1",
		"--nfs-port", strconv.Itoa(e.nfsPort), "--mount-port", strconv.Itoa(e.mountPort),
		"--rdma-port", strconv.Itoa(e.rdmaPort),
		"--admin-listen", "127.0.0.1:"+strconv.Itoa(e.adm), "--admin-token-file", e.tokenFile,
		"--state-dir", e.state, "--v=2")
}

func (e *env) startController() {
	args := []string{"controller", "--endpoint", "unix://" + e.ctrlSock, "--admin-token-file", e.tokenFile,
		"--admin-port", strconv.Itoa(e.adm), "--nfs-port", strconv.Itoa(e.nfsPort),
		"--rdma-port", strconv.Itoa(e.rdmaPort), "--mount-port", strconv.Itoa(e.mountPort),
		"--v=4",
		"--kubeconfig", e.kubeconfig, "--namespace", ledgerNamespace}
	e.start("controller", testenv.Dialable("unix", e.ctrlSock), e.bin, args...)
}

func (e *env) startSidecars() {
	e.start("csi-provisioner", nil, e.k8s("csi-provisioner"),
		"--kubeconfig="+e.kubeconfig, "--csi-address="+e.ctrlSock, "--leader-election=false",
		"--extra-create-metadata", "--timeout=60s", "--v=4")
	e.start("csi-attacher", nil, e.k8s("csi-attacher"),
		"--kubeconfig="+e.kubeconfig, "--csi-address="+e.ctrlSock, "--leader-election=false",
		// reconcile often: checks our ListVolumes' published nodes (--v=4 logs each round)
		"--timeout=60s", "--reconcile-sync=2s", "--v=4")
}

// teardown stops the processes (sidecars first, the server last); a
// failed test gets their logs.
func (e *env) teardown() {
	for _, n := range []string{"csi-attacher", "csi-provisioner", "controller", "server"} {
		e.stop(n)
	}
	if e.t.Failed() {
		for _, n := range []string{"csi-provisioner", "csi-attacher", "controller", "server"} {
			e.t.Logf("---- %s log (tail) ----\n%s", n, e.logOf(n))
		}
	}
	if e.t.Failed() || os.Getenv("E2E_KEEP") != "" {
		e.t.Logf("logs kept in %s", e.dir)
		return
	}
	os.RemoveAll(e.dir)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDrivers()
	os.Exit(code)
}
