package counters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// DeviceCollector exports the RDMA device choices made in this process
// (devselect.Counts), read at scrape time:
// nfsrdma_transport_selections_total{provider,device,transport}.
type DeviceCollector struct {
	counts func() []devselect.Count
	desc   *prometheus.Desc
}

// NewDeviceCollector returns a collector of counts (nil: none), with
// constLabels on every series.
func NewDeviceCollector(counts func() []devselect.Count, constLabels prometheus.Labels) *DeviceCollector {
	return &DeviceCollector{counts: counts, desc: prometheus.NewDesc(metrics.Namespace+"_transport_selections_total",
		"RDMA device choices made for mounts, by verbs provider (siw, ibverbs), device and transport (iwarp, roce, ib).",
		[]string{"provider", "device", "transport"}, constLabels)}
}

// Describe implements prometheus.Collector.
func (c *DeviceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *DeviceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.counts == nil {
		return
	}
	for _, n := range c.counts() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n.N), n.Provider, n.Device, n.Transport)
	}
}
