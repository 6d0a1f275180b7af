package fusecounters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
)

// MountMemoryCollector exports what one FUSE mount holds
// (fusefs.MemoryStats, Mount.Memory), read at scrape time, with const
// labels:
//
//   - nfsrdma_mount_memory_bytes{kind}: bytes held now: "write_behind"
//     (FUSE write data copied, in flight to the server), "uncommitted"
//     (acknowledged UNSTABLE, kept until COMMIT), "heap" (the mount
//     process's Go heap in use, everything included);
//   - nfsrdma_mount_memory_limit_bytes{kind}: the mount's bound of
//     "write_behind" (fusefs.MountWriteBehindBytes) and of "uncommitted"
//     (fusefs.MountDirtyBytes, past which a background COMMIT starts);
//   - nfsrdma_mount_inodes: nodes in the mount's tree;
//   - nfsrdma_mount_dir_entries: READDIRPLUS entries kept for LOOKUPs;
//   - nfsrdma_mount_access_entries: NFS ACCESS answers kept per inode and
//     credential for permission checks;
//   - nfsrdma_client_write_verifier_changes_total: COMMITs that found the
//     server's write verifier changed (RFC 1813 section 3.3.7);
//   - nfsrdma_client_resent_bytes_total: bytes re-sent after such a change.
type MountMemoryCollector struct {
	stats                                                  func() fusefs.MemoryStats
	bytes, limit, inodes, dirEntries, access, verf, resent *prometheus.Desc
}

// NewMountMemoryCollector returns a collector of what stats returns,
// labelled constLabels.
func NewMountMemoryCollector(stats func() fusefs.MemoryStats, constLabels prometheus.Labels) *MountMemoryCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(metrics.Namespace+"_"+name, help, labels, constLabels)
	}
	return &MountMemoryCollector{
		stats:      stats,
		bytes:      d("mount_memory_bytes", "Memory a FUSE mount holds now, in bytes, by kind: write_behind (write data in flight to the server), uncommitted (acknowledged UNSTABLE, kept until COMMIT), heap (the mount process's Go heap in use).", "kind"),
		limit:      d("mount_memory_limit_bytes", "A FUSE mount's bound of write_behind and uncommitted memory, in bytes.", "kind"),
		inodes:     d("mount_inodes", "Nodes in a FUSE mount's tree (names the kernel looked up and has not forgotten)."),
		dirEntries: d("mount_dir_entries", "READDIRPLUS entries a FUSE mount keeps for the LOOKUPs that follow a listing."),
		access:     d("mount_access_entries", "NFS ACCESS answers a FUSE mount keeps per inode and credential for permission checks."),
		verf:       d("client_write_verifier_changes_total", "COMMITs that found the server's write verifier changed since the UNSTABLE WRITEs they covered (data re-sent)."),
		resent:     d("client_resent_bytes_total", "Bytes re-sent with FILE_SYNC after a write verifier change."),
	}
}

// Describe implements prometheus.Collector.
func (c *MountMemoryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.limit, c.inodes, c.dirEntries, c.access, c.verf, c.resent} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *MountMemoryCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	g := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(c.bytes, g, float64(s.WriteBehindBytes), "write_behind")
	ch <- prometheus.MustNewConstMetric(c.bytes, g, float64(s.UncommittedBytes), "uncommitted")
	ch <- prometheus.MustNewConstMetric(c.bytes, g, float64(s.HeapBytes), "heap")
	ch <- prometheus.MustNewConstMetric(c.limit, g, float64(fusefs.MountWriteBehindBytes), "write_behind")
	ch <- prometheus.MustNewConstMetric(c.limit, g, float64(fusefs.MountDirtyBytes), "uncommitted")
	ch <- prometheus.MustNewConstMetric(c.inodes, g, float64(s.Inodes))
	ch <- prometheus.MustNewConstMetric(c.dirEntries, g, float64(s.DirEntries))
	ch <- prometheus.MustNewConstMetric(c.access, g, float64(s.AccessEntries))
	ch <- prometheus.MustNewConstMetric(c.verf, prometheus.CounterValue, float64(s.Write.VerifierChanges))
	ch <- prometheus.MustNewConstMetric(c.resent, prometheus.CounterValue, float64(s.Write.ResentBytes))
}
