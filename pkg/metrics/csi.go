package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// CSI is the metrics of a CSI gRPC server (controller or node), a
// prometheus.Collector:
//
//   - nfsrdma_csi_operations_total{method,grpc_code}: calls by method
//     ("NodePublishVolume") and gRPC status code ("OK", "NotFound");
//   - nfsrdma_csi_operation_duration_seconds{method}: their duration,
//     histogram over LatencyBuckets.
type CSI struct {
	ops *prometheus.CounterVec
	dur *prometheus.HistogramVec
}

// NewCSI returns CSI metrics with constLabels on every series (nil: none).
func NewCSI(constLabels prometheus.Labels) *CSI {
	return &CSI{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "csi", Name: "operations_total",
			Help:        "CSI gRPC calls, by method and gRPC status code.",
			ConstLabels: constLabels,
		}, []string{"method", "grpc_code"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "csi", Name: "operation_duration_seconds",
			Help:        "Duration of CSI gRPC calls, in seconds, by method.",
			ConstLabels: constLabels,
			Buckets:     LatencyBuckets,
		}, []string{"method"}),
	}
}

// Observe records one call of fullMethod ("/csi.v1.Node/NodePublishVolume";
// the label is its last element) that ended with err (nil: OK; a gRPC
// status error: its code; anything else: Unknown) after d. A nil *CSI
// records nothing.
func (m *CSI) Observe(fullMethod string, err error, d time.Duration) {
	if m == nil {
		return
	}
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	m.ops.WithLabelValues(method, status.Code(err).String()).Inc()
	m.dur.WithLabelValues(method).Observe(d.Seconds())
}

// UnaryServerInterceptor returns a gRPC interceptor recording every unary
// call (see Observe). To keep one interceptor, call Observe from an
// existing one instead.
func (m *CSI) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		m.Observe(info.FullMethod, err, time.Since(start))
		return resp, err
	}
}

// Describe implements prometheus.Collector.
func (m *CSI) Describe(ch chan<- *prometheus.Desc) {
	m.ops.Describe(ch)
	m.dur.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *CSI) Collect(ch chan<- prometheus.Metric) {
	m.ops.Collect(ch)
	m.dur.Collect(ch)
}
