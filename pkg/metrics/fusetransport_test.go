package metrics_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/fusecounters"
)

// The FUSE transport of a mount, scraped over HTTP: the transport in use
// at 1, the other at 0, and the request counts (and the ring's requests
// handed to a goroutine) when counted (the server of fuse_uring=auto and
// on counts; go-fuse's /dev/fuse server does not).
func TestFUSETransportCollector(t *testing.T) {
	s := fuseuring.Stats{Transport: fuseuring.TransportIOURing, Queues: 2, Entries: 8, RingRequests: 1234, DevRequests: 56, Offloaded: 78}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fusecounters.NewFUSETransportCollector(func() fuseuring.Stats { return s }, prometheus.Labels{"pod": "p"}))
	fams := metrics.Scrape(t, http.DefaultClient, metrics.ServeReg(t, reg)+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nfsrdma_mount_fuse_transport", metrics.L("transport", "io_uring", "pod", "p"), 1},
		{"nfsrdma_mount_fuse_transport", metrics.L("transport", "dev_fuse", "pod", "p"), 0},
		{"nfsrdma_mount_fuse_requests_total", metrics.L("transport", "io_uring", "pod", "p"), 1234},
		{"nfsrdma_mount_fuse_requests_total", metrics.L("transport", "dev_fuse", "pod", "p"), 56},
		{"nfsrdma_mount_fuse_offloaded_total", metrics.L("pod", "p"), 78},
	} {
		if got := metrics.MustValue(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// go-fuse's /dev/fuse server counts nothing: no request counts
	s = fuseuring.Stats{Transport: fuseuring.TransportDevFUSE}
	fams = metrics.Scrape(t, http.DefaultClient, metrics.ServeReg(t, reg)+"/metrics")
	if got := metrics.MustValue(t, fams, "nfsrdma_mount_fuse_transport", metrics.L("transport", "dev_fuse", "pod", "p")); got != 1 {
		t.Errorf("dev_fuse transport = %v, want 1", got)
	}
	for _, name := range []string{"nfsrdma_mount_fuse_requests_total", "nfsrdma_mount_fuse_offloaded_total"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s exported without counts", name)
		}
	}
}
