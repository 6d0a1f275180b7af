package fusecounters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
)

// FUSETransportCollector exports how one FUSE mount gets the kernel's
// requests (fuseuring.Stats, fusefs.Mount.FUSETransport), read at scrape
// time, with const labels:
//
//   - nfsrdma_mount_fuse_transport{transport}: 1 for the transport the
//     mount uses ("io_uring" or "dev_fuse"), 0 for the other;
//   - nfsrdma_mount_fuse_requests_total{transport}: requests answered
//     over each, when counted (the server of fuse_uring=auto and on
//     counts; go-fuse's /dev/fuse server counts nothing);
//   - nfsrdma_mount_fuse_offloaded_total: requests of the ring answered
//     by a goroutine rather than on their queue's thread (locks that
//     wait, an unlink or rename while a file of the mount is open,
//     requests that came together), when the ring serves.
type FUSETransportCollector struct {
	stats                          func() fuseuring.Stats
	transport, requests, offloaded *prometheus.Desc
}

// NewFUSETransportCollector returns a collector of what stats returns,
// labelled constLabels.
func NewFUSETransportCollector(stats func() fuseuring.Stats, constLabels prometheus.Labels) *FUSETransportCollector {
	return &FUSETransportCollector{
		stats: stats,
		transport: prometheus.NewDesc(metrics.Namespace+"_mount_fuse_transport",
			"1 for the transport a FUSE mount gets the kernel's requests over: io_uring (FUSE over io_uring) or dev_fuse (/dev/fuse).", []string{"transport"}, constLabels),
		requests: prometheus.NewDesc(metrics.Namespace+"_mount_fuse_requests_total",
			"FUSE requests a mount answered, by transport (io_uring: over the ring; dev_fuse: read from /dev/fuse).", []string{"transport"}, constLabels),
		offloaded: prometheus.NewDesc(metrics.Namespace+"_mount_fuse_offloaded_total",
			"FUSE requests of the ring answered by a goroutine rather than on their queue's thread (a hand-off there and back).", nil, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *FUSETransportCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.transport
	ch <- c.requests
	ch <- c.offloaded
}

// Collect implements prometheus.Collector.
func (c *FUSETransportCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, t := range []string{fuseuring.TransportIOURing, fuseuring.TransportDevFUSE} {
		v := 0.0
		if s.Transport == t {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.transport, prometheus.GaugeValue, v, t)
	}
	if s.RingRequests+s.DevRequests > 0 {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.RingRequests), fuseuring.TransportIOURing)
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.DevRequests), fuseuring.TransportDevFUSE)
	}
	if s.RingRequests+s.Offloaded > 0 {
		ch <- prometheus.MustNewConstMetric(c.offloaded, prometheus.CounterValue, float64(s.Offloaded))
	}
}
