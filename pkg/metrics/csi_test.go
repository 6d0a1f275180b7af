package metrics

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// The CSI interceptor on a real gRPC server: calls counted by method and
// status code, durations observed.
func TestCSIInterceptor(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	m := NewCSI(nil)
	srv := grpc.NewServer(grpc.UnaryInterceptor(m.UnaryServerInterceptor()))
	hs := health.NewServer()
	hs.SetServingStatus("csi", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	reg := prometheus.NewRegistry()
	var devices atomic.Pointer[[]DeviceCount]
	devices.Store(&[]DeviceCount{})
	reg.MustRegister(m, NewDeviceCollector(func() []DeviceCount { return *devices.Load() }, nil))
	url := serveReg(t, reg) + "/metrics"

	for range 3 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "csi"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("err %v, want NotFound", err)
	}
	f := scrape(t, nil, url)
	if v := mustValue(t, f, "nfsrdma_csi_operations_total", l("method", "Check", "grpc_code", "OK")); v != 3 {
		t.Errorf("OK calls %v, want 3", v)
	}
	if v := mustValue(t, f, "nfsrdma_csi_operations_total", l("method", "Check", "grpc_code", "NotFound")); v != 1 {
		t.Errorf("NotFound calls %v, want 1", v)
	}
	if v := mustValue(t, f, "nfsrdma_csi_operation_duration_seconds", l("method", "Check")); v != 4 {
		t.Errorf("duration samples %v, want 4", v)
	}

	// Device choices, read at scrape time.
	if v := value(f, "nfsrdma_transport_selections_total", l("provider", "siw")); v >= 0 {
		t.Errorf("a selection series before any choice: %v", v)
	}
	devices.Store(&[]DeviceCount{{Provider: "siw", Device: "siw0", Transport: "iwarp", N: 2}, {Provider: "ibverbs", Device: "mlx5_0", Transport: "roce", N: 1}})
	f = scrape(t, nil, url)
	if v := mustValue(t, f, "nfsrdma_transport_selections_total", l("provider", "siw", "device", "siw0", "transport", "iwarp")); v != 2 {
		t.Errorf("siw selections %v, want 2", v)
	}
	if v := mustValue(t, f, "nfsrdma_transport_selections_total", l("provider", "ibverbs", "device", "mlx5_0", "transport", "roce")); v != 1 {
		t.Errorf("ibverbs selections %v, want 1", v)
	}

	var nilCSI *CSI
	nilCSI.Observe("/x/Y", nil, time.Second) // no-op
}
