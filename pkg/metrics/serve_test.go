package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

func TestServeOff(t *testing.T) {
	ctx := testenv.Context(t, 5*time.Second)
	if err := Serve(ctx, "", prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if err := ServeUnix(ctx, "", prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Serve on a real TCP port: /metrics, /healthz, 404 elsewhere, and a clean
// stop when ctx ends; a port in use is an error.
func TestServeTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nfsrdma_test_total", Help: "test"})
	reg.MustRegister(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, addr, reg) }()
	url := "http://" + addr
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := get(t, http.DefaultClient, url+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := get(t, http.DefaultClient, url+"/nothing"); code != 404 {
		t.Fatalf("/nothing: %d", code)
	}
	if v := mustValue(t, scrape(t, nil, url+"/metrics"), "nfsrdma_test_total", nil); v != 0 {
		t.Fatalf("counter %v", v)
	}
	c.Add(3)
	if v := mustValue(t, scrape(t, nil, url+"/metrics"), "nfsrdma_test_total", nil); v != 3 {
		t.Fatalf("counter %v, want 3", v)
	}
	// A second server on the same address fails.
	if err := Serve(ctx, addr, reg); err == nil {
		t.Fatal("second Serve on the same address succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still listening")
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
}

// ServeUnix on a real unix socket: replaces a stale socket, mode 0600,
// removed on return; refuses to replace a regular file.
func TestServeUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // leaves the socket file behind
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nfsrdma_test_gauge", Help: "test"})
	reg.MustRegister(g)
	g.Set(42)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeUnix(ctx, path, reg) }()
	c := unixClient(path)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Get("http://x/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v, %v", fi.Mode(), err)
	}
	if v := mustValue(t, scrape(t, c, "http://x/metrics"), "nfsrdma_test_gauge", nil); v != 42 {
		t.Fatalf("gauge %v", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if err := ServeUnix(context.Background(), file, reg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("ServeUnix over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Fatal("regular file replaced")
	}
}
