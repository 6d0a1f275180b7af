package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// FUSE transports of a mount (the mount option fuse_uring).
const (
	FUSETransportIOURing = "io_uring" // FUSE over io_uring: ring entries on every queue, COMMIT_AND_FETCH
	FUSETransportDevFUSE = "dev_fuse" // read(2) and write(2) of /dev/fuse
)

// FUSETransport is how one FUSE mount gets the kernel's requests.
type FUSETransport struct {
	// Transport is FUSETransportIOURing or FUSETransportDevFUSE.
	Transport string
	// Counted says whether the request counts are known (the server of
	// fuse_uring=auto and on counts; go-fuse's /dev/fuse server does not).
	Counted bool
	// RingRequests were answered over the ring, DevRequests read from
	// /dev/fuse (INIT, FORGET, INTERRUPT, and every request without the
	// ring).
	RingRequests, DevRequests uint64
}

// FUSETransportCollector exports how one FUSE mount gets the kernel's
// requests (FUSETransport), read at scrape time, with const labels:
//
//   - nfsrdma_mount_fuse_transport{transport}: 1 for the transport the
//     mount uses ("io_uring" or "dev_fuse"), 0 for the other;
//   - nfsrdma_mount_fuse_requests_total{transport}: requests answered
//     over each, when counted.
type FUSETransportCollector struct {
	stats               func() FUSETransport
	transport, requests *prometheus.Desc
}

// NewFUSETransportCollector returns a collector of what stats returns,
// labelled constLabels.
func NewFUSETransportCollector(stats func() FUSETransport, constLabels prometheus.Labels) *FUSETransportCollector {
	return &FUSETransportCollector{
		stats: stats,
		transport: prometheus.NewDesc(Namespace+"_mount_fuse_transport",
			"1 for the transport a FUSE mount gets the kernel's requests over: io_uring (FUSE over io_uring) or dev_fuse (/dev/fuse).", []string{"transport"}, constLabels),
		requests: prometheus.NewDesc(Namespace+"_mount_fuse_requests_total",
			"FUSE requests a mount answered, by transport (io_uring: over the ring; dev_fuse: read from /dev/fuse).", []string{"transport"}, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *FUSETransportCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.transport
	ch <- c.requests
}

// Collect implements prometheus.Collector.
func (c *FUSETransportCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, t := range []string{FUSETransportIOURing, FUSETransportDevFUSE} {
		v := 0.0
		if s.Transport == t {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.transport, prometheus.GaugeValue, v, t)
	}
	if s.Counted {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.RingRequests), FUSETransportIOURing)
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.DevRequests), FUSETransportDevFUSE)
	}
}
