package demo

import (
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"

	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDrivers()
	os.Exit(code)
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"64MiB", 64 << 20, true},
		{"64mib", 64 << 20, true},
		{"64Mi", 64 << 20, true},
		{"64M", 64 << 20, true},
		{"1GiB", 1 << 30, true},
		{"1.5G", 3 << 29, true},
		{" 2 GiB ", 2 << 30, true},
		{"512KiB", 512 << 10, true},
		{"1MB", 1000000, true},
		{"1GB", 1000000000, true},
		{"100B", 100, true},
		{"", 0, false},
		{"lots", 0, false},
		{"GiB", 0, false},
		{"-1MiB", 0, false},
		{"1.2.3MiB", 0, false},
		{"10 parsecs", 0, false},
		{"0.3B", 0, false},
		{"99999999TiB", 0, false},
	} {
		got, err := ParseSize(c.in)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if !c.ok && (err == nil || !errors.Is(err, ErrUsage)) {
			t.Errorf("ParseSize(%q) = %d, %v; want an ErrUsage error", c.in, got, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 64 << 20: "64.0 MiB",
		256 << 20: "256 MiB", 1 << 30: "1.00 GiB", 3 << 29: "1.50 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string // "" valid, else part of the message
	}{
		{Options{}, ""},
		{Options{Transport: "TCP"}, ""},
		{Options{Transport: "udp"}, "want rdma or tcp"},
		{Options{Size: 1000}, "at least 1.00 MiB"},
		{Options{Files: -1}, "--files -1"},
		{Options{Files: MaxFiles + 1}, "--files"},
		{Options{CreditsPerPod: 4096}, "--credits 4096"},
		{Options{Transport: "tcp", CreditsPerPod: 4}, "needs --transport rdma"},
	} {
		err := c.o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v; want an ErrUsage error with %q", c.o, err, c.want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	err := checkHost(1000, "/dev/fuse")
	if !errors.Is(err, ErrHost) || !strings.Contains(err.Error(), "driver demo needs root (it mounts FUSE file systems): run it with sudo") {
		t.Errorf("not root: %v", err)
	}
	err = checkHost(0, filepath.Join(t.TempDir(), "fuse"))
	if !errors.Is(err, ErrHost) || !strings.Contains(err.Error(), "does not exist") ||
		!strings.Contains(err.Error(), "modprobe fuse") || !strings.Contains(err.Error(), "--device /dev/fuse") {
		t.Errorf("no /dev/fuse: %v", err)
	}
}

func TestPlan(t *testing.T) {
	for _, c := range []struct {
		size int64
		n    int
	}{{64 << 20, 4}, {1<<20 + 3, 4}, {1 << 20, 1}, {5, 8}} {
		fs := plan(c.size, c.n)
		var sum int64
		for i, f := range fs {
			sum += f.size
			if i > 0 && (fs[0].size-f.size > 1 || f.size > fs[0].size) {
				t.Errorf("plan(%d, %d): uneven sizes %d and %d", c.size, c.n, fs[0].size, f.size)
			}
		}
		if len(fs) != c.n || sum != c.size {
			t.Errorf("plan(%d, %d): %d files, %d bytes", c.size, c.n, len(fs), sum)
		}
	}
}

// The tests below run `driver demo` for real: root and /dev/fuse, FUSE
// mounts under a temporary directory. Without them they skip, except
// under CI=true.

func needRootFUSE(t *testing.T) {
	t.Helper()
	if err := CheckHost(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// demoRun is one `driver demo` process whose output is collected.
type demoRun struct {
	cmd  *exec.Cmd
	dir  string
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (r *demoRun) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Write(b)
}

func (r *demoRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// startDemo starts `driver demo --dir DIR args...` with DIR a new
// directory beneath a temporary one; cleanup detaches any mount and ends
// any process left there, whatever the test's outcome.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	needRootFUSE(t)
	bin := testenv.Driver(t, false)
	base, err := os.MkdirTemp("", "demo")
	if err != nil {
		t.Fatal(err)
	}
	r := &demoRun{dir: filepath.Join(base, "d"), done: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"demo", "--dir", r.dir}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
		sweepMounts(base)
		killProcesses(mountProcesses(base))
		os.RemoveAll(base)
	})
	return r
}

// wait waits for the demo to exit (at most d) and returns its error.
func (r *demoRun) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(d):
		t.Fatalf("demo still running after %v:\n%s", d, r.output())
		return nil
	}
}

// waitFor waits until the output holds s (at most d).
func (r *demoRun) waitFor(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(r.output(), s) {
		select {
		case <-r.done:
			t.Fatalf("demo exited (%v) before printing %q:\n%s", r.err, s, r.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v:\n%s", s, d, r.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNothingLeft: no mount of ours and no `driver mount` process
// beneath dir.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	ms, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("left mounted: %s (%s)", m.MountPoint, m.FsType)
	}
	if pids := mountProcesses(dir); len(pids) > 0 {
		t.Errorf("driver mount processes left: %v", pids)
	}
}

// TestDemo runs the demo with 64 MiB in 4 files over each transport: it
// succeeds, prints every step, verifies the data, and leaves nothing
// behind (mounts, processes, its directory).
func TestDemo(t *testing.T) {
	for _, tr := range []string{"rdma", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			r := startDemo(t, "--size", "64MiB", "--files", "4", "--transport", tr)
			err := r.wait(t, 5*time.Minute)
			out := r.output()
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out)
			}
			for i := 1; i <= totalSteps; i++ {
				if !strings.Contains(out, fmt.Sprintf("[%2d/%d] ", i, totalSteps)) {
					t.Errorf("step %d not printed", i)
				}
			}
			for _, want := range []string{
				"CreateVolume pvc-demo", "ControllerPublishVolume pvc-demo", "NodePublishVolume pod-a", "NodePublishVolume pod-b",
				"Write files through pod-a", "64.0 MiB, ", "4 files, SHA-256 of each matches what pod-a wrote",
				"Lock through pod-a, blocking pod-b", "pod-a's write lock refused pod-b (EAGAIN, F_GETLK saw it); pod-b's F_SETLKW got the lock",
				"NodeGetVolumeStats", "64.0 MiB used of the 128 MiB quota", "CreateSnapshot snapshot-demo",
				"CreateVolume pvc-demo-clone (from snapshot)", "NodePublishVolume pod-c", "in the clone has the SHA-256 pod-a wrote",
				"quota 128 MiB -> 256 MiB; pod-a's mount sees 256 MiB", "NodeUnpublishVolume pod-c", "ControllerUnpublishVolume x2",
				"DeleteSnapshot snapshot-demo", "DeleteVolume x2", "no mount, no mount process, export directory empty",
				"mounted 127.0.0.1:/pvc-demo (" + tr, "1 connection to :", "MiB/s", "every step passed",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if strings.Contains(out, "FAILED") {
				t.Errorf("a step failed")
			}
			if tr == "rdma" && !strings.Contains(out, "rdma, RPC-over-RDMA version 2, ") {
				t.Errorf("transport not reported")
			}
			if tr == "tcp" && !strings.Contains(out, "transport: TCP") {
				t.Errorf("transport not reported")
			}
			checkNothingLeft(t, filepath.Dir(r.dir))
			if _, err := os.Stat(r.dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("demo directory left: %v", err)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestDemoInterrupt: SIGINT (Ctrl-C) while data is written tears
// everything down and exits non-zero.
func TestDemoInterrupt(t *testing.T) {
	r := startDemo(t, "--size", "1GiB", "--files", "2")
	r.waitFor(t, "NodePublishVolume pod-b", 2*time.Minute)
	time.Sleep(300 * time.Millisecond)
	r.cmd.Process.Signal(syscall.SIGINT)
	err := r.wait(t, 2*time.Minute)
	out := r.output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("exit after Ctrl-C: %v; want a non-zero status", err)
	}
	for _, want := range []string{"interrupted", "tearing down:", "NodeUnpublishVolume pod-a: ok", "DeleteVolume 1#127.0.0.1#/#pvc-demo#delete: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkNothingLeft(t, filepath.Dir(r.dir))
	if _, err := os.Stat(r.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo directory left: %v", err)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestDemoKeep: with --keep the three mounts stay up, showing the files,
// until Ctrl-C; then the normal teardown runs and the exit status is 0;
// the directory is kept.
func TestDemoKeep(t *testing.T) {
	r := startDemo(t, "--size", "8MiB", "--files", "2", "--keep")
	r.waitFor(t, "Press Ctrl-C to tear down.", 2*time.Minute)
	ms, err := mountsUnder(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Errorf("%d mounts under the directory with --keep, want 3 (pod-a, pod-b, pod-c)", len(ms))
	}
	for _, m := range ms {
		if m.FsType != fuseType {
			t.Errorf("%s: %s, want %s", m.MountPoint, m.FsType, fuseType)
		}
		if !strings.HasSuffix(m.MountPoint, "pvc-demo/mount") {
			continue
		}
		if st, err := os.Stat(filepath.Join(m.MountPoint, "file-001.bin")); err != nil || st.Size() != 4<<20 {
			t.Errorf("file-001.bin through %s: %v", m.MountPoint, err)
		}
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	if err := r.wait(t, 2*time.Minute); err != nil {
		t.Errorf("exit after Ctrl-C with --keep: %v, want success", err)
	}
	out := r.output()
	if !strings.Contains(out, "no mount, no mount process, export directory empty") || !strings.Contains(out, "every step passed") {
		t.Errorf("teardown after --keep not complete")
	}
	checkNothingLeft(t, filepath.Dir(r.dir))
	if _, err := os.Stat(filepath.Join(r.dir, "demo.log")); err != nil {
		t.Errorf("--keep: directory not kept: %v", err)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestRunRefusesTestBinary: Run never starts a Go test binary as the
// mounts' driver (it would run its tests again in each mount's child).
func TestRunRefusesTestBinary(t *testing.T) {
	for _, exe := range []string{"", "/nonexistent/demo.test"} {
		err := Run(t.Context(), Options{Exe: exe, Out: io.Discard, Size: MinSize})
		if !errors.Is(err, ErrUsage) && !errors.Is(err, ErrHost) {
			t.Errorf("Run with Exe %q: %v; want ErrUsage (or ErrHost without root)", exe, err)
		}
		if err != nil && errors.Is(err, ErrUsage) && !strings.Contains(err.Error(), "test binary") {
			t.Errorf("Run with Exe %q: %v", exe, err)
		}
	}
}

func TestMountDevice(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ log, want string }{
		{`I1121 04:30:50.1 1 transport.go:55] "` + transport.LogDeviceChosen + `" server="127.0.0.1" provider="siw" device="siw0" transport="iwarp" reason="built without the ibverbs tag"`, "software iWARP siw0"},
		{`I1121 04:30:50.1 1 transport.go:55] "` + transport.LogDeviceChosen + `" server="10.0.0.5" provider="ibverbs" device="mlx5_0" transport="roce" reason="rdma_cm resolves it"`, "mlx5_0 (roce)"},
		{`I1121 04:30:50.1 1 mount.go:180] "fusefs: mounted" source="127.0.0.1:/pvc-demo"`, ""},
	} {
		p := filepath.Join(dir, "mount.log")
		if err := os.WriteFile(p, []byte("first line\n"+c.log+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, ok := mountDevice(p)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("mountDevice(%q) = %q, %v; want %q", c.log, got, ok, c.want)
		}
	}
	if _, ok := mountDevice(filepath.Join(dir, "missing")); ok {
		t.Error("a missing log gives a device")
	}
}
