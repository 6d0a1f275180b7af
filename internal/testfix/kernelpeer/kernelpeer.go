// Package kernelpeer gives tests the environment of ../shared/kernel-peer:
// a Linux kernel under qemu with kernel soft-iWARP (siw), soft-RoCE, the
// rping server and knfsd serving NFS over RDMA (see its README). Tests that
// need it call Env: outside CI they skip when the peer is not running; under
// CI=true (where .ci/run starts it) that is a failure.
package kernelpeer

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Env returns the KEY=VALUE pairs of the running peer's env file
// ($KERNEL_PEER_DIR/env, default /tmp/kernel-peer/env): KP_HOST,
// KP_RPING_PORT, KP_NFSRDMA_PORT, KP_NFS_PORT, KP_MOUNT_PORT, KP_SHARE, ...
// It skips (fails under CI=true) unless the peer runs and has key.
func Env(t testing.TB, key string) map[string]string {
	t.Helper()
	env := map[string]string{}
	if f, err := os.Open(filepath.Join(dir(), "env")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
		f.Close()
	}
	if pid := env["KP_PID"]; pid != "" {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			env = map[string]string{} // a stale env file: the VM is gone
		}
	}
	if env[key] == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kernel peer not running (../shared/kernel-peer/start); required under CI")
		}
		t.Skip("kernel peer not running: start ../shared/kernel-peer/start to run the interop tests")
	}
	return env
}

// Sh runs cmd in the guest as root (the peer's `sh`) and returns its
// output; a non-zero exit fails the test.
func Sh(t testing.TB, cmd string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(tools(), "sh"), cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("in the guest: %q: %v\n%s", cmd, err, out)
	}
	return string(out)
}

func tools() string {
	if d := os.Getenv("KERNEL_PEER_TOOLS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../../../../shared/kernel-peer")
}

// Check runs the peer's `check`: it fails the test when the guest logged a
// kernel BUG, Oops or WARNING, or stopped answering.
func Check(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(tools(), "check")).CombinedOutput(); err != nil {
		t.Fatalf("kernel peer check failed: %v\n%s", err, out)
	}
}
