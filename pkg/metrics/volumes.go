package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// VolumeCollector exports the export server's volumes
// (nfs/server.Server.Volumes), read at scrape time, labelled volume (the
// volume's path, e.g. "pvc-1"):
//
//   - nfsrdma_volume_quota_bytes: the quota, in bytes (0: unlimited);
//   - nfsrdma_volume_used_bytes: bytes allocated in the volume's tree;
//   - nfsrdma_volume_used_inodes: inodes in the tree;
//   - nfsrdma_volume_granted_nodes: nodes granted access;
//   - nfsrdma_volumes: volumes registered.
type VolumeCollector struct {
	volumes                         func() []admin.Volume
	quota, used, inodes, nodes, num *prometheus.Desc
}

// NewVolumeCollector returns a collector of what volumes returns
// (nfs/server.Server.Volumes), with constLabels on every series.
func NewVolumeCollector(volumes func() []admin.Volume, constLabels prometheus.Labels) *VolumeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, constLabels)
	}
	return &VolumeCollector{
		volumes: volumes,
		quota:   d("volume_quota_bytes", "Quota of the volume, in bytes; 0 means unlimited.", "volume"),
		used:    d("volume_used_bytes", "Bytes allocated in the volume's tree (st_blocks*512, hard links counted once).", "volume"),
		inodes:  d("volume_used_inodes", "Inodes in the volume's tree, its root included.", "volume"),
		nodes:   d("volume_granted_nodes", "Nodes granted access to the volume.", "volume"),
		num:     d("volumes", "Volumes registered on the export server."),
	}
}

// Describe implements prometheus.Collector.
func (c *VolumeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.quota
	ch <- c.used
	ch <- c.inodes
	ch <- c.nodes
	ch <- c.num
}

// Collect implements prometheus.Collector.
func (c *VolumeCollector) Collect(ch chan<- prometheus.Metric) {
	vs := c.volumes()
	for _, v := range vs {
		ch <- prometheus.MustNewConstMetric(c.quota, prometheus.GaugeValue, float64(v.QuotaBytes), v.Path)
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(v.UsedBytes), v.Path)
		ch <- prometheus.MustNewConstMetric(c.inodes, prometheus.GaugeValue, float64(v.UsedInodes), v.Path)
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(len(v.Access)), v.Path)
	}
	ch <- prometheus.MustNewConstMetric(c.num, prometheus.GaugeValue, float64(len(vs)))
}
