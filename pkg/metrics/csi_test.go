package metrics

import (
	"net"
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
	reg.MustRegister(m)
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

	var nilCSI *CSI
	nilCSI.Observe("/x/Y", nil, time.Second) // no-op
}
