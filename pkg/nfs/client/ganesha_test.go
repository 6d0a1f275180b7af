package client

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Paths of the third-party server used by the integration tests (Debian
// packages nfs-ganesha, nfs-ganesha-vfs, rpcbind).
const (
	ganeshaBin = "/usr/bin/ganesha.nfsd"
	rpcbindBin = "/usr/sbin/rpcbind"
)

// ganesha is a running NFS-Ganesha serving Dir over NFSv3/TCP on 127.0.0.1.
type ganesha struct {
	Dir                string // the exported directory
	NFSPort, MountPort int
	NLMPort            int    // with Enable_NLM
	Export             string // path to mount
	tmp                string
	cmd                *exec.Cmd
	rpcbind            *exec.Cmd // nil if rpcbind was already running
	skip               string    // why the integration tests skip
	waitCh             <-chan error
}

var srv *ganesha

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	srv, err = startGanesha()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ganesha:", err)
		if os.Getenv("CI") == "true" {
			os.Exit(1)
		}
	}
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	os.Exit(code)
}

// needGanesha skips (or, under CI=true, fails) a test when Ganesha could
// not be started.
func needGanesha(tb testing.TB) *ganesha {
	tb.Helper()
	if srv != nil && srv.cmd != nil {
		return srv
	}
	msg := "NFS-Ganesha not available (install nfs-ganesha nfs-ganesha-vfs rpcbind, run as root)"
	if srv != nil && srv.skip != "" {
		msg = srv.skip
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("CI=true: %s", msg)
	}
	tb.Skip(msg)
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startGanesha starts the Ganesha of the package's tests, with NLM (whose
// SM_MON calls reach this process's NSM when no rpc.statd runs).
func startGanesha() (*ganesha, error) { return startGaneshaWith(true) }

// startGaneshaWith starts Ganesha, with its NLM v4 service (registered
// with rpcbind; NLMPort) when nlm is set.
func startGaneshaWith(nlm bool) (*ganesha, error) {
	if _, err := os.Stat(ganeshaBin); err != nil {
		return &ganesha{skip: "NFS-Ganesha not installed: " + err.Error()}, nil
	}
	if os.Geteuid() != 0 {
		return &ganesha{skip: "NFS-Ganesha needs root (VFS FSAL uses open_by_handle_at)"}, nil
	}
	tmp, err := os.MkdirTemp("", "nfsclient-ganesha-")
	if err != nil {
		return nil, err
	}
	g := &ganesha{tmp: tmp, Dir: filepath.Join(tmp, "export")}
	for _, d := range []string{g.Dir, filepath.Join(tmp, "recovery")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	g.Export = g.Dir
	fail := func(err error) (*ganesha, error) {
		g.stop()
		return nil, err
	}
	// Ganesha registers NFSv3 and MOUNT with rpcbind at startup and fails
	// without it.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:111", time.Second); err == nil {
		c.Close()
	} else {
		if _, err := os.Stat(rpcbindBin); err != nil {
			return fail(fmt.Errorf("rpcbind not running and not installed: %w", err))
		}
		cmd := exec.Command(rpcbindBin, "-f", "-w")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("start rpcbind: %w", err))
		}
		g.rpcbind = cmd
		if err := waitTCP("127.0.0.1:111", 10*time.Second); err != nil {
			return fail(fmt.Errorf("rpcbind: %w", err))
		}
	}
	ports, err := freePorts(4)
	if err != nil {
		return fail(err)
	}
	g.NFSPort, g.MountPort = ports[0], ports[1]
	conf := fmt.Sprintf(`NFS_CORE_PARAM {
	Protocols = 3;
	NFS_Port = %d;
	MNT_Port = %d;
	NLM_Port = %d;
	Rquota_Port = %d;
	Bind_addr = 127.0.0.1;
	Enable_NLM = %t;
	Enable_RQUOTA = false;
}
NFSV4 {
	RecoveryRoot = %s;
	Graceless = true;
}
EXPORT {
	Export_Id = 77;
	Path = %s;
	Pseudo = /nfsclienttest;
	Access_Type = RW;
	Squash = No_Root_Squash;
	Protocols = 3;
	Transports = TCP;
	SecType = sys;
	FSAL { Name = VFS; }
}
`, ports[0], ports[1], ports[2], ports[3], nlm, filepath.Join(tmp, "recovery"), g.Dir)
	if nlm {
		g.NLMPort = ports[2]
	}
	confPath := filepath.Join(tmp, "ganesha.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return fail(err)
	}
	out, err := os.Create(filepath.Join(tmp, "stdout"))
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	cmd := exec.Command(ganeshaBin, "-F", "-L", filepath.Join(tmp, "ganesha.log"), "-f", confPath, "-p", filepath.Join(tmp, "ganesha.pid"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start ganesha: %w", err))
	}
	g.cmd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	g.waitCh = exited
	// Ready when MOUNT answers NULL (NFSv3 does not wait for the NFSv4 grace period).
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			g.cmd = nil
			log, _ := os.ReadFile(filepath.Join(tmp, "ganesha.log"))
			return fail(fmt.Errorf("ganesha exited during startup: %v\n%s", err, tail(string(log), 2000)))
		default:
		}
		if nullOK(fmt.Sprintf("127.0.0.1:%d", g.MountPort)) {
			g.waitCh = exited
			return g, nil
		}
		if time.Now().After(deadline) {
			return fail(errors.New("ganesha: MOUNT did not answer NULL within 30s"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nullOK(addr string) bool {
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(addr, sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Null(ctx, mount3.Program, mount3.Version) == nil
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop ends Ganesha (SIGTERM to its process group, SIGKILL after 10 s),
// then rpcbind if this process started it, and removes the temp dir.
func (g *ganesha) stop() {
	if g.cmd != nil {
		killGroup(g.cmd.Process.Pid, g.waitCh, 10*time.Second)
		g.cmd = nil
	}
	if g.rpcbind != nil {
		ch := make(chan error, 1)
		go func() { ch <- g.rpcbind.Wait() }()
		killGroup(g.rpcbind.Process.Pid, ch, 5*time.Second)
		g.rpcbind = nil
	}
	if g.tmp != "" && os.Getenv("NFSCLIENT_KEEP_TMP") == "" {
		os.RemoveAll(g.tmp)
	}
}

func killGroup(pid int, done <-chan error, grace time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}
