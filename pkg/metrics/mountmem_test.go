package metrics_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/fusecounters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
)

// The memory of a mount, scraped over HTTP: every figure of
// fusefs.MemoryStats under its name, the write counters from its Write
// field, the mount's bounds (fusefs.MountWriteBehindBytes,
// fusefs.MountDirtyBytes) beside them.
func TestMountMemoryCollector(t *testing.T) {
	s := fusefs.MemoryStats{WriteBehindBytes: 3 << 20, UncommittedBytes: 5 << 20, Inodes: 42, DirEntries: 7, AccessEntries: 11, HeapBytes: 9 << 20,
		Write: client.WriteStats{VerifierChanges: 2, ResentBytes: 4096}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fusecounters.NewMountMemoryCollector(func() fusefs.MemoryStats { return s }, prometheus.Labels{"pod": "p"}))
	fams := metrics.Scrape(t, http.DefaultClient, metrics.ServeReg(t, reg)+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nfsrdma_mount_memory_bytes", metrics.L("kind", "write_behind", "pod", "p"), 3 << 20},
		{"nfsrdma_mount_memory_bytes", metrics.L("kind", "uncommitted", "pod", "p"), 5 << 20},
		{"nfsrdma_mount_memory_bytes", metrics.L("kind", "heap", "pod", "p"), 9 << 20},
		{"nfsrdma_mount_memory_limit_bytes", metrics.L("kind", "write_behind", "pod", "p"), fusefs.MountWriteBehindBytes},
		{"nfsrdma_mount_memory_limit_bytes", metrics.L("kind", "uncommitted", "pod", "p"), fusefs.MountDirtyBytes},
		{"nfsrdma_mount_inodes", metrics.L("pod", "p"), 42},
		{"nfsrdma_mount_dir_entries", metrics.L("pod", "p"), 7},
		{"nfsrdma_mount_access_entries", metrics.L("pod", "p"), 11},
		{"nfsrdma_client_write_verifier_changes_total", metrics.L("pod", "p"), 2},
		{"nfsrdma_client_resent_bytes_total", metrics.L("pod", "p"), 4096},
	} {
		if got := metrics.MustValue(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
