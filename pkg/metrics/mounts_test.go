package metrics

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// fakeMount is a mount process's registry served on a real unix socket.
type fakeMount struct {
	socket string
	calls  atomic.Uint64
	rpc    *RPCClient
}

func startFakeMount(t *testing.T, socket string, constLabels prometheus.Labels) *fakeMount {
	t.Helper()
	m := &fakeMount{socket: socket, rpc: NewRPCClient(constLabels)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewClientCollector(func() sunrpc.ClientStats { return sunrpc.ClientStats{Calls: m.calls.Load()} }, constLabels),
		m.rpc,
		collectors.NewGoCollector(), // not re-exposed by the node
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeUnix(ctx, socket, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeUnix: %v", err)
		}
	})
	c := unixClient(socket)
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := c.Get("http://x/healthz")
		if err == nil {
			resp.Body.Close()
			return m
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// observe records one NFS READ round trip through m's RPCClient.
func (m *fakeMount) observe(t *testing.T) {
	t.Helper()
	head := make([]byte, 24)
	copy(head[12:], []byte{0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 6}) // NFS v3 READ
	tr := m.rpc.Dial(func(context.Context) (sunrpc.ClientTransport, error) { return fakeTransport{}, nil })
	ct, _ := tr(context.Background())
	if _, err := ct.RoundTrip(context.Background(), &sunrpc.Call{Msg: sunrpc.Message{Head: head}}); err != nil {
		t.Fatal(err)
	}
}

type fakeTransport struct{ sunrpc.ClientTransport }

func (fakeTransport) RoundTrip(context.Context, *sunrpc.Call) (*sunrpc.Reply, error) {
	time.Sleep(time.Millisecond)
	return &sunrpc.Reply{Body: make([]byte, 100), Placed: 4096}, nil
}

// The node's MountCollector re-exposes its mounts' metrics, fetched from
// real unix sockets at scrape time, with each target's labels; a missing
// or hung mount costs only its own metrics (up 0) and at most the
// timeout.
func TestMountCollector(t *testing.T) {
	dir := t.TempDir()
	a := startFakeMount(t, filepath.Join(dir, "a.sock"), prometheus.Labels{"pod": "stale-label"})
	b := startFakeMount(t, filepath.Join(dir, "b.sock"), nil)
	hung := filepath.Join(dir, "hung.sock")
	hl, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go func() { // accepts, never answers
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()

	var listErr atomic.Bool
	targets := []MountTarget{
		{Socket: a.socket, Labels: prometheus.Labels{"volume": "pvc-a", "pod": "pod-a"}},
		{Socket: b.socket, Labels: prometheus.Labels{"volume": "pvc-b", "pod": "pod-b"}},
		{Socket: filepath.Join(dir, "gone.sock"), Labels: prometheus.Labels{"volume": "pvc-c", "pod": "pod-c"}},
		{Socket: hung, Labels: prometheus.Labels{"volume": "pvc-d", "pod": "pod-d"}},
	}
	mc := NewMountCollector(func(ctx context.Context) ([]MountTarget, error) {
		if listErr.Load() {
			return nil, errors.New("mounter unreachable")
		}
		return targets, nil
	})
	mc.Timeout = 300 * time.Millisecond
	node := prometheus.NewRegistry()
	node.MustRegister(mc)
	url := serveReg(t, node) + "/metrics"

	a.calls.Store(5)
	b.calls.Store(7)
	a.observe(t)
	start := time.Now()
	f := scrape(t, nil, url)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("scrape took %v with a hung mount and a 300ms timeout", d)
	}
	pa, pb := l("volume", "pvc-a", "pod", "pod-a"), l("volume", "pvc-b", "pod", "pod-b")
	if v := mustValue(t, f, "nfsrdma_client_rpc_calls_total", pa); v != 5 {
		t.Errorf("pod a calls %v, want 5", v)
	}
	if v := mustValue(t, f, "nfsrdma_client_rpc_calls_total", pb); v != 7 {
		t.Errorf("pod b calls %v, want 7", v)
	}
	if m := find(f, "nfsrdma_client_rpc_calls_total", l("pod", "stale-label")); m != nil {
		t.Errorf("mount's own pod label kept: %v", m)
	}
	if v := mustValue(t, f, "nfsrdma_client_rpc_duration_seconds", map[string]string{"pod": "pod-a", "procedure": "READ"}); v != 1 {
		t.Errorf("pod a READ latency samples %v, want 1", v)
	}
	if m := find(f, "nfsrdma_client_rpc_duration_seconds", map[string]string{"pod": "pod-a", "procedure": "READ"}); m.GetHistogram().GetSampleSum() < 0.001 || len(m.GetHistogram().GetBucket()) != len(LatencyBuckets)+1 { // +Inf in text
		t.Errorf("histogram not carried over: %v", m)
	}
	if v := mustValue(t, f, "nfsrdma_client_rpc_bytes_total", map[string]string{"pod": "pod-a", "procedure": "READ", "direction": "received"}); v != 4196 {
		t.Errorf("READ bytes received %v, want 4196", v)
	}
	for pod, want := range map[string]float64{"pod-a": 1, "pod-b": 1, "pod-c": 0, "pod-d": 0} {
		if v := mustValue(t, f, "nfsrdma_mount_scrape_up", l("pod", pod)); v != want {
			t.Errorf("%s up %v, want %v", pod, v, want)
		}
	}
	if v := mustValue(t, f, "nfsrdma_mount_scrape_duration_seconds", l("pod", "pod-d")); v < 0.3 || v > 1.5 {
		t.Errorf("hung mount's fetch took %vs, want about the 0.3s timeout", v)
	}
	if f["go_goroutines"] != nil {
		t.Error("a mount's go_* metrics re-exposed")
	}

	// Values follow the processes.
	a.calls.Store(50)
	a.observe(t)
	f = scrape(t, nil, url)
	if v := mustValue(t, f, "nfsrdma_client_rpc_calls_total", pa); v != 50 {
		t.Errorf("pod a calls %v, want 50", v)
	}
	if v := mustValue(t, f, "nfsrdma_client_rpc_duration_seconds", map[string]string{"pod": "pod-a", "procedure": "READ"}); v != 2 {
		t.Errorf("pod a READ latency samples %v, want 2", v)
	}

	// A mount that ended is gone from the next scrape.
	targets = targets[1:2]
	f = scrape(t, nil, url)
	if value(f, "nfsrdma_client_rpc_calls_total", pa) != -1 || value(f, "nfsrdma_mount_scrape_up", l("pod", "pod-a")) != -1 {
		t.Error("pod a still exposed after its mount ended")
	}
	if v := mustValue(t, f, "nfsrdma_client_rpc_calls_total", pb); v != 7 {
		t.Errorf("pod b calls %v", v)
	}

	// The mounter unreachable: the scrape still answers.
	listErr.Store(true)
	f = scrape(t, nil, url)
	if f["nfsrdma_client_rpc_calls_total"] != nil {
		t.Error("mount metrics without a list")
	}
	f = scrape(t, nil, url) // the error of the last scrape is counted after it
	if v := mustValue(t, f, "promhttp_metric_handler_errors_total", l("cause", "gathering")); v < 1 {
		t.Errorf("gathering errors %v", v)
	}
}
