package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// ClientCollector exports an NFS client's RPC counters
// (nfs/client.Client.Stats, a sunrpc.ClientStats), read at scrape time,
// with const labels (a mount's volume and pod):
//
//   - nfsrdma_client_rpc_calls_total: calls started;
//   - nfsrdma_client_rpc_retransmits_total: transmissions after a call's
//     first one;
//   - nfsrdma_client_reconnects_total: connections established after the
//     first.
type ClientCollector struct {
	stats                          func() sunrpc.ClientStats
	calls, retransmits, reconnects *prometheus.Desc
}

// NewClientCollector returns a collector of the counters stats returns
// (client.Client.Stats), labelled constLabels.
func NewClientCollector(stats func() sunrpc.ClientStats, constLabels prometheus.Labels) *ClientCollector {
	return &ClientCollector{
		stats:       stats,
		calls:       prometheus.NewDesc(Namespace+"_client_rpc_calls_total", "RPC calls the NFS client started.", nil, constLabels),
		retransmits: prometheus.NewDesc(Namespace+"_client_rpc_retransmits_total", "RPC transmissions of the NFS client after a call's first one.", nil, constLabels),
		reconnects:  prometheus.NewDesc(Namespace+"_client_reconnects_total", "Connections of the NFS client established after the first.", nil, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *ClientCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.calls
	ch <- c.retransmits
	ch <- c.reconnects
}

// Collect implements prometheus.Collector.
func (c *ClientCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.Calls))
	ch <- prometheus.MustNewConstMetric(c.retransmits, prometheus.CounterValue, float64(s.Retransmits))
	ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(s.Reconnects))
}
