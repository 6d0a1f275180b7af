// Package testenv holds what the integration tests of several packages
// need from the machine: root and /dev/fuse, the driver binary, free
// loopback ports. Under CI=true a missing prerequisite fails the test
// instead of skipping it.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NeedRootFUSE skips t (fails it under CI=true) unless the process is
// root and /dev/fuse opens read-write: what mounting a FUSE file system
// with mount(2) needs.
func NeedRootFUSE(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (mount(2) of a FUSE file system)"
	} else if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		why = "needs /dev/fuse: " + err.Error()
	} else {
		f.Close()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

var (
	buildMu sync.Mutex
	built   = map[bool]string{}
)

// Driver builds cmd/driver (with the race detector when race is set) once
// per test binary and returns its path; the binary stays in a temporary
// directory for the rest of the run.
func Driver(t testing.TB, race bool) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[race]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "nfsrdma-driver-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "driver")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/driver")...)
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/driver: %v\n%s", err, out)
	}
	built[race] = bin
	return bin
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago,
// for a child process to listen on. It is taken below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), so the outgoing
// connections of this machine, which take their local ports from that
// range, cannot occupy it before the child binds it; no port is returned
// twice by one test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	low := ephemeralLow()
	// 8192 ports below the ephemeral range, never below 1024
	base := max(low-8192, 1024)
	span := low - base
	if span <= 0 {
		t.Fatalf("no ports below the ephemeral range (it starts at %d)", low)
	}
	for range span {
		p := base + rand.IntN(span)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatalf("no free port in [%d, %d)", base, low)
	return 0
}

var (
	portMu     sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range; 32768
// (Linux's default) when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 1024 {
		return 32768
	}
	return n
}

// Dialable returns a readiness check: whether addr accepts a connection
// on network ("tcp", "unix", "unixpacket") within a second.
func Dialable(network, addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

// RemoveDrivers deletes the binaries Driver built; call it from TestMain
// after m.Run.
func RemoveDrivers() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for race, bin := range built {
		os.RemoveAll(filepath.Dir(bin))
		delete(built, race)
	}
}

// MainCheckingLeaks is a TestMain: it runs the tests of m and then, when
// they passed (and this is not a fuzzing run), fails the test binary if
// more goroutines run than before them once 5 s have passed, printing
// every goroutine's stack: a connection, server or timer left running by
// a test. It does not return (os.Exit).
func MainCheckingLeaks(m *testing.M) {
	flag.Parse()
	before := runtime.NumGoroutine()
	code := m.Run()
	if f := flag.Lookup("test.fuzz"); code == 0 && (f == nil || f.Value.String() == "") {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "goroutine leak: %d running, %d before the tests\n%s\n", n, before, buf)
			code = 1
		}
	}
	os.Exit(code)
}

// Context is t.Context() with a deadline d from now: it ends when the
// test ends or after d, whichever comes first, so that no test waits
// forever on a peer that never answers.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// NeedRoot skips t (fails it under CI=true) unless the process is root;
// why says what needs root (e.g. "the export server changes file owners").
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root: " + why)
	}
	t.Skip("needs root: " + why)
}

// WaitFor polls cond every 10 ms until it holds (true) or d has passed
// (false): a wait on a condition, for tests that would otherwise sleep.
func WaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Eventually fails t unless cond holds within d (polled every 10 ms);
// what names the awaited condition in the failure.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !WaitFor(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}
