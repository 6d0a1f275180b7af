package counters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
)

// ReadMapCollector exports the counters of the export server's READ
// mappings (nfsserver.ReadMapStats, Server.ReadMapStats), read at scrape time:
//
//   - nfsrdma_server_read_map_reads_total{result}: READs by how their data
//     was found: "hit", "miss" (a window mapped), "copied" (pread),
//     "fault" (the file shrank under the mapping; answered by pread);
//   - nfsrdma_server_read_map_evictions_total: windows unmapped (bound,
//     idleness, REMOVE);
//   - nfsrdma_server_read_map_bytes, _limit_bytes, _windows (gauges).
type ReadMapCollector struct {
	stats                                   func() nfsserver.ReadMapStats
	reads, evictions, bytes, limit, windows *prometheus.Desc
}

// NewReadMapCollector returns a collector of the counters stats returns.
func NewReadMapCollector(stats func() nfsserver.ReadMapStats) *ReadMapCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "server", "read_map_"+name), help, labels, nil)
	}
	return &ReadMapCollector{
		stats:     stats,
		reads:     d("reads_total", "NFS READs by where their data came from: hit (a mapped window), miss (a window mapped for it), copied (pread), fault (the file shrank under the mapping).", "result"),
		evictions: d("evictions_total", "READ mapping windows unmapped: by the bound, idleness or REMOVE."),
		bytes:     d("bytes", "Bytes of files mapped for READ now."),
		limit:     d("limit_bytes", "The bound on the bytes mapped for READ (0: READ copies)."),
		windows:   d("windows", "READ mapping windows mapped now."),
	}
}

// Describe implements prometheus.Collector.
func (c *ReadMapCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.reads, c.evictions, c.bytes, c.limit, c.windows} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ReadMapCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	n := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	g := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	n(c.reads, s.Hits, "hit")
	n(c.reads, s.Misses, "miss")
	n(c.reads, s.Copied, "copied")
	n(c.reads, s.Faults, "fault")
	n(c.evictions, s.Evictions)
	g(c.bytes, s.Mapped)
	g(c.limit, s.Limit)
	g(c.windows, int64(s.Windows))
}
