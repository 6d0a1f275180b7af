package fusemount

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/fieldtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// Every counter of fusefs.MemoryStats reaches metrics.MountMemory under
// its name, the write counters from its Write field, with the mount's
// bounds.
func TestMountMemory(t *testing.T) {
	var m fusefs.MemoryStats
	fieldtest.Fill(&m)
	m.Write = client.WriteStats{VerifierChanges: 100, ResentBytes: 200}
	got := mountMemory(func() fusefs.MemoryStats { return m })()
	fieldtest.Same(t, m, got, "Write")
	if got.VerifierChanges != 100 || got.ResentBytes != 200 || got.WriteBehindLimit != fusefs.MountWriteBehindBytes || got.UncommittedLimit != fusefs.MountDirtyBytes {
		t.Errorf("%+v", got)
	}
}

// The FUSE transport of a mount reaches metrics.FUSETransport, counted
// only when its server counts (fuse_uring=auto or on).
func TestFUSETransport(t *testing.T) {
	ring := fuseuring.Stats{Transport: fuseuring.TransportIOURing, Queues: 2, Entries: 8, RingRequests: 10, DevRequests: 3}
	if got := fuseTransport(func() fuseuring.Stats { return ring })(); got != (metrics.FUSETransport{Transport: "io_uring", Counted: true, RingRequests: 10, DevRequests: 3}) {
		t.Errorf("ring: %+v", got)
	}
	dev := fuseuring.Stats{Transport: fuseuring.TransportDevFUSE}
	if got := fuseTransport(func() fuseuring.Stats { return dev })(); got != (metrics.FUSETransport{Transport: "dev_fuse"}) {
		t.Errorf("go-fuse's /dev/fuse: %+v", got)
	}
}

// A device choice made in this process is counted.
func TestDevices(t *testing.T) {
	count := func(ch devselect.Choice) uint64 {
		for _, c := range devices() {
			if c.Provider == ch.Provider && c.Device == ch.Device && c.Transport == ch.Transport {
				return c.N
			}
		}
		return 0
	}
	dev, ch, err := devselect.Select("127.0.0.1", devselect.OverrideSIW)
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	before := count(ch)
	dev, _, err = devselect.Select("127.0.0.1", devselect.OverrideSIW)
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if n := count(ch); n != before+1 || n < 2 {
		t.Errorf("count %d after %d, want one more", n, before)
	}
}
