package metrics

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The memory of a mount, scraped over HTTP: every figure of MountMemory
// under its name, the bounds beside them.
func TestMountMemoryCollector(t *testing.T) {
	s := MountMemory{WriteBehindBytes: 3 << 20, UncommittedBytes: 5 << 20, Inodes: 42, DirEntries: 7, AccessEntries: 11, HeapBytes: 9 << 20,
		WriteBehindLimit: 32 << 20, UncommittedLimit: 64 << 20, VerifierChanges: 2, ResentBytes: 4096}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewMountMemoryCollector(func() MountMemory { return s }, prometheus.Labels{"pod": "p"}))
	fams := scrape(t, http.DefaultClient, serveReg(t, reg)+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nfsrdma_mount_memory_bytes", l("kind", "write_behind", "pod", "p"), 3 << 20},
		{"nfsrdma_mount_memory_bytes", l("kind", "uncommitted", "pod", "p"), 5 << 20},
		{"nfsrdma_mount_memory_bytes", l("kind", "heap", "pod", "p"), 9 << 20},
		{"nfsrdma_mount_memory_limit_bytes", l("kind", "write_behind", "pod", "p"), 32 << 20},
		{"nfsrdma_mount_memory_limit_bytes", l("kind", "uncommitted", "pod", "p"), 64 << 20},
		{"nfsrdma_mount_inodes", l("pod", "p"), 42},
		{"nfsrdma_mount_dir_entries", l("pod", "p"), 7},
		{"nfsrdma_mount_access_entries", l("pod", "p"), 11},
		{"nfsrdma_client_write_verifier_changes_total", l("pod", "p"), 2},
		{"nfsrdma_client_resent_bytes_total", l("pod", "p"), 4096},
	} {
		if got := mustValue(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
