package counters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
)

// FileCacheCollector exports the counters of the export server's open-file
// cache of READ, WRITE, COMMIT and SETATTR's size change
// (nfsserver.FileCacheStats, Server.FileCacheStats), read at scrape time:
//
//   - nfsrdma_server_file_cache_lookups_total{result}: calls that found
//     their file open ("hit") or opened it ("miss");
//   - nfsrdma_server_file_cache_evictions_total: files closed (bound,
//     idleness, REMOVE or RENAME, found unlinked);
//   - nfsrdma_server_file_cache_open_files (gauge).
type FileCacheCollector struct {
	stats                    func() nfsserver.FileCacheStats
	lookups, evictions, open *prometheus.Desc
}

// NewFileCacheCollector returns a collector of the counters stats returns.
func NewFileCacheCollector(stats func() nfsserver.FileCacheStats) *FileCacheCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "server", "file_cache_"+name), help, labels, nil)
	}
	return &FileCacheCollector{
		stats:     stats,
		lookups:   d("lookups_total", "NFS READs, WRITEs, COMMITs and size-changing SETATTRs by whether their file was open in the cache (hit) or opened (miss).", "result"),
		evictions: d("evictions_total", "Files the open-file cache closed: by the bound, idleness, REMOVE or RENAME, or found unlinked."),
		open:      d("open_files", "Files open in the open-file cache now."),
	}
}

// Describe implements prometheus.Collector.
func (c *FileCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lookups, c.evictions, c.open} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *FileCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	n := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	n(c.lookups, s.Hits, "hit")
	n(c.lookups, s.Misses, "miss")
	n(c.evictions, s.Evictions)
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
}
