package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"

	"github.com/spf13/cobra"

	"github.com/nfsrdma/nfsrdma-csi/pkg/perftest"
)

// execute runs the driver with args and returns its standard output.
func execute(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestHelpOnEveryCommand(t *testing.T) {
	var walk func(c *cobra.Command)
	var paths [][]string
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(newRootCmd())
	want := []string{"", "controller", "demo", "mount", "mounter", "node", "perf", "perf client", "perf loopback", "perf server", "server", "version"}
	var got []string
	for _, p := range paths {
		got = append(got, strings.Join(p, " "))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("commands %q, want %q", got, want)
	}
	for _, p := range paths {
		out, err := execute(t, testenv.Context(t, 30*time.Second), append(p, "--help")...)
		if err != nil || !strings.Contains(out, "Usage:") || !strings.Contains(out, "--v Level") {
			t.Errorf("%v --help: %v\n%s", p, err, out)
		}
	}
}

func TestGroupsPrintHelp(t *testing.T) {
	for _, args := range [][]string{{}, {"perf"}} {
		out, err := execute(t, testenv.Context(t, 30*time.Second), args...)
		if err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := execute(t, testenv.Context(t, 30*time.Second), "version")
	if err != nil || out != "dev\n" {
		t.Fatalf("version: %q, %v", out, err)
	}
	old := version
	version = "v1.2.3"
	defer func() { version = old }()
	if out, _ := execute(t, testenv.Context(t, 30*time.Second), "version"); out != "v1.2.3\n" {
		t.Fatalf("version: %q", out)
	}
}

func TestKlogFlags(t *testing.T) {
	for _, args := range [][]string{{"--v=3", "version"}, {"-v", "2", "version"}, {"--log_dir=/tmp", "--logtostderr=true", "version"}, {"--log-dir=/tmp", "version"}} {
		if _, err := execute(t, testenv.Context(t, 30*time.Second), args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	_, _ = execute(t, testenv.Context(t, 30*time.Second), "--v=0", "version")
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "loopback", "--test", "ib_write_bw"},
		{"perf", "loopback", "--size", "1MB"},
		{"perf", "loopback", "--depth", "0", "--iters", "-3"},
		{"perf", "loopback", "extra"},
		{"server"}, // does not exist yet
		{"perf", "bogus"},
	} {
		if _, err := execute(t, testenv.Context(t, 30*time.Second), args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestPerfLoopbackJSON(t *testing.T) {
	out, err := execute(t, testenv.Context(t, 30*time.Second), "perf", "loopback", "--test", "send_bw", "--size", "4KiB",
		"--iters", "10", "--depth", "2", "--verify", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep perftest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if rep.RDMA.Test != perftest.SendBW || rep.RDMA.SizeBytes != 4096 || !rep.RDMA.Verified || rep.Baseline == nil || rep.Ratio == nil {
		t.Fatalf("report %+v", rep)
	}
}

func TestPerfLoopbackTable(t *testing.T) {
	out, err := execute(t, testenv.Context(t, 30*time.Second), "perf", "loopback", "--test", "send_lat", "--iters", "20", "--no-crc", "--baseline=false")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "send_lat  siw") || !strings.Contains(lines[1], " off ") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestPerfClientAgainstServer(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	srv, err := perftest.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = srv.Serve(sctx) }()
	out, err := execute(t, ctx, "perf", "client", "--server", srv.Addr().String(), "--test", "write_bw",
		"--size", "64KiB", "--iters", "8", "--depth", "4", "--verify", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep perftest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.RDMA.Test != perftest.WriteBW || rep.Baseline != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestPerfServerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(testenv.Context(t, 30*time.Second))
	done := make(chan error, 1)
	go func() {
		_, err := execute(t, ctx, "perf", "server", "--listen", "127.0.0.1:0")
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("perf server did not stop")
	}
}
