package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
)

// newRegistry returns a registry with the Go runtime and process
// collectors and cs (metrics.NewProcessRegistry).
func newRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	return metrics.NewProcessRegistry(cs...)
}

// serveMetrics serves reg's /metrics on addr until ctx ends ("" = off);
// a failure is logged, never fatal.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) {
	if addr == "" {
		return
	}
	if err := metrics.Serve(ctx, addr, reg); err != nil {
		klog.ErrorS(err, "metrics: stopped", "address", addr)
	}
}
