package counters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
)

// DRCCollector exports the export server's duplicate request cache
// (nfsserver.DRCStats, Server.DRCStats), read at scrape time:
//
//   - nfsrdma_server_drc_calls_total{result}: calls of non-idempotent
//     procedures by outcome: "hit" (a retransmission answered with its
//     original's reply), "in_progress" (a retransmission that came while
//     its original executed, and waited for it), "miss" (executed);
//   - nfsrdma_server_drc_dropped_total{reason}: replies dropped from the
//     cache, "evicted" by its size bound or "expired";
//   - nfsrdma_server_drc_entries, _bytes, _pending (gauges): replies held,
//     their size in bytes, calls of cached procedures executing now.
type DRCCollector struct {
	stats                                   func() nfsserver.DRCStats
	calls, dropped, entries, bytes, pending *prometheus.Desc
}

// NewDRCCollector returns a collector of the counters stats returns.
func NewDRCCollector(stats func() nfsserver.DRCStats) *DRCCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "server", "drc_"+name), help, labels, nil)
	}
	return &DRCCollector{
		stats:   stats,
		calls:   d("calls_total", "Calls of non-idempotent NFS procedures by duplicate request cache outcome: hit, in_progress (waited for the original), miss (executed).", "result"),
		dropped: d("dropped_total", "Replies dropped from the duplicate request cache: evicted by its bound, or expired.", "reason"),
		entries: d("entries", "Replies held by the duplicate request cache."),
		bytes:   d("bytes", "Size of the replies held by the duplicate request cache, in bytes."),
		pending: d("pending", "Calls of cached NFS procedures executing now."),
	}
}

// Describe implements prometheus.Collector.
func (c *DRCCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.dropped, c.entries, c.bytes, c.pending} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *DRCCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	n := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	g := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	n(c.calls, s.Hits, "hit")
	n(c.calls, s.InProgress, "in_progress")
	n(c.calls, s.Misses, "miss")
	n(c.dropped, s.Evictions, "evicted")
	n(c.dropped, s.Expired, "expired")
	g(c.entries, s.Entries)
	g(c.bytes, s.Bytes)
	g(c.pending, s.Pending)
}
