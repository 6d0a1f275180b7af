package health

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity answers Probe with what the test sets.
type identity struct {
	csipb.UnimplementedIdentityServer
	mu    sync.Mutex
	ready *wrapperspb.BoolValue
	err   error
	delay time.Duration
	calls int
}

func (i *identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.calls++
	time.Sleep(i.delay)
	if i.err != nil {
		return nil, i.err
	}
	return &csipb.ProbeResponse{Ready: i.ready}, nil
}

func (i *identity) set(ready *wrapperspb.BoolValue, err error, delay time.Duration) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.ready, i.err, i.delay = ready, err, delay
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Get(url)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
}

// TestHealthzProbesOverTheSocket serves an Identity service on a unix
// socket and checks /healthz through Serve: ready and unset ready give
// 200, not ready, a Probe error, a Probe slower than the timeout and a
// plugin that stopped serving give 500; each request is one Probe call.
func TestHealthzProbesOverTheSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	id := &identity{ready: wrapperspb.Bool(true)}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, id)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, addr, "unix://"+sock, 200*time.Millisecond) }()
	url := "http://" + addr + "/healthz"

	if code, body := get(t, url); code != 200 || body != "ok\n" {
		t.Fatalf("ready: %d %q", code, body)
	}
	id.set(nil, nil, 0)
	if code, _ := get(t, url); code != 200 {
		t.Fatalf("ready unset: %d, want 200", code)
	}
	id.set(wrapperspb.Bool(false), nil, 0)
	if code, body := get(t, url); code != 500 || body != "not ready\n" {
		t.Fatalf("not ready: %d %q", code, body)
	}
	id.set(nil, status.Error(codes.FailedPrecondition, "mounter gone"), 0)
	if code, body := get(t, url); code != 500 || !strings.Contains(body, "mounter gone") {
		t.Fatalf("Probe error: %d %q", code, body)
	}
	id.set(wrapperspb.Bool(true), nil, time.Second)
	if code, body := get(t, url); code != 500 || !strings.Contains(body, "DeadlineExceeded") {
		t.Fatalf("slow Probe: %d %q", code, body)
	}
	id.set(wrapperspb.Bool(true), nil, 0)
	id.mu.Lock()
	calls := id.calls
	id.mu.Unlock()
	if calls != 5 {
		t.Errorf("%d Probe calls for 5 requests", calls)
	}
	srv.Stop()
	if code, _ := get(t, url); code != 500 {
		t.Fatalf("plugin stopped: %d, want 500", code)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///csi/csi.sock":  "unix:///csi/csi.sock",
		"unix://csi/csi.sock":   "unix:csi/csi.sock",
		"tcp://127.0.0.1:10000": "passthrough:///127.0.0.1:10000",
	} {
		if got, err := Target(in); err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"/csi/csi.sock", "http://x", "::"} {
		if _, err := Target(bad); err == nil {
			t.Errorf("Target(%q): no error", bad)
		}
	}
	if err := Serve(context.Background(), "", "bogus", 0); err != nil {
		t.Errorf("Serve with addr \"\": %v", err)
	}
}
