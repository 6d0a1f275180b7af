package fusemount

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// mountMemory reads what a FUSE mount holds (fusefs.Mount.Memory), with
// its bounds (fusefs.MountWriteBehindBytes, fusefs.MountDirtyBytes), for
// metrics.NewMountMemoryCollector.
func mountMemory(read func() fusefs.MemoryStats) func() metrics.MountMemory {
	return func() metrics.MountMemory {
		m := read()
		return metrics.MountMemory{
			WriteBehindBytes: m.WriteBehindBytes, UncommittedBytes: m.UncommittedBytes, HeapBytes: m.HeapBytes,
			WriteBehindLimit: fusefs.MountWriteBehindBytes, UncommittedLimit: fusefs.MountDirtyBytes,
			Inodes: m.Inodes, DirEntries: m.DirEntries, AccessEntries: m.AccessEntries,
			VerifierChanges: m.Write.VerifierChanges, ResentBytes: m.Write.ResentBytes,
		}
	}
}

// devices reads the RDMA device choices made in this process
// (devselect.Counts) for metrics.NewDeviceCollector.
func devices() []metrics.DeviceCount {
	cs := devselect.Counts()
	out := make([]metrics.DeviceCount, len(cs))
	for i, c := range cs {
		out[i] = metrics.DeviceCount{Provider: c.Provider, Device: c.Device, Transport: c.Transport, N: c.N}
	}
	return out
}

// fuseTransport reads how a FUSE mount gets the kernel's requests
// (fusefs.Mount.FUSETransport) for metrics.NewFUSETransportCollector; a
// mount served by go-fuse's /dev/fuse server (no ring asked for) counts
// no requests.
func fuseTransport(read func() fuseuring.Stats) func() metrics.FUSETransport {
	return func() metrics.FUSETransport {
		s := read()
		counted := s.RingRequests+s.DevRequests > 0
		return metrics.FUSETransport{Transport: s.Transport, Counted: counted, RingRequests: s.RingRequests, DevRequests: s.DevRequests}
	}
}
