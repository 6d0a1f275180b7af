package fusefs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestDriverMountBinary runs `driver mount` against our server, uses the
// mount, then ends it once with SIGTERM and once with an unmount from
// outside; each time the process exits 0 and the mount point is gone.
func TestDriverMountBinary(t *testing.T) {
	needFUSE(t)
	bin := testenv.Driver(t, false)
	srv := startServer(t)
	for _, how := range []string{"sigterm", "umount"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			cmd := exec.Command(bin, "mount", "-o",
				"proto=tcp,port="+strconv.Itoa(srv.nfsPort)+",mountport="+strconv.Itoa(srv.mountPort)+",actimeo=1",
				"127.0.0.1:/", dir)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				if mounted(t, dir) {
					syscall.Unmount(dir, syscall.MNT_DETACH)
					t.Errorf("%s left mounted", dir)
				}
			})
			deadline := time.Now().Add(20 * time.Second)
			for !mounted(t, dir) {
				select {
				case err := <-exited:
					t.Fatalf("driver mount exited: %v\n%s", err, out.String())
				default:
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("not mounted after 20 s\n%s", out.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			name := "via-binary-" + how
			if err := os.WriteFile(filepath.Join(dir, name), []byte(how), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(srv.root, name)); err != nil || string(got) != how {
				t.Fatalf("on disk: %q %v", got, err)
			}
			if how == "sigterm" {
				cmd.Process.Signal(syscall.SIGTERM)
			} else if err := unmountBusy(dir, 5*time.Second); err != nil {
				t.Fatal("umount:", err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("driver mount: %v\n%s", err, out.String())
				}
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("driver mount did not exit\n%s", out.String())
			}
			if mounted(t, dir) {
				t.Fatal("mount point still mounted after exit")
			}
		})
	}
}

// TestDriverMountBadOptions checks that an unknown option is an error
// before anything is mounted.
func TestDriverMountBadOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver")
	}
	bin := testenv.Driver(t, false)
	out, err := exec.Command(bin, "mount", "-o", "nolock,sec=sys", "127.0.0.1:/", t.TempDir()).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !bytes.Contains(out, []byte("unknown option")) {
		t.Fatalf("%v\n%s", err, out)
	}
}

// unmountBusy is umount(2) of dir, retried while the mount is busy, for
// up to timeout: on a loaded machine an unmount right after a file on the
// mount was written and closed has met EBUSY, as kubelet's unmounts
// (retried) may.
func unmountBusy(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Unmount(dir, 0)
		if err != syscall.EBUSY || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
