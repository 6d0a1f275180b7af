package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Program label values of the RPC metrics.
const (
	ProgramNFS   = "nfs"   // NFS version 3 (program 100003)
	ProgramMount = "mount" // MOUNT version 3 (program 100005)
)

// ProgramName returns the program label of an RPC call: "nfs" for NFSv3,
// "mount" for MOUNT v3, otherwise the program and version numbers
// ("100227v3").
func ProgramName(prog, vers uint32) string {
	switch {
	case prog == nfs3.Program && vers == nfs3.Version:
		return ProgramNFS
	case prog == mount3.Program && vers == mount3.Version:
		return ProgramMount
	}
	return strconv.FormatUint(uint64(prog), 10) + "v" + strconv.FormatUint(uint64(vers), 10)
}

// ProcedureName returns the procedure label of an RPC call: the RFC 1813
// name ("GETATTR", "MNT") for NFSv3 and MOUNT v3 procedures, otherwise
// the procedure number ("7").
func ProcedureName(prog, vers, proc uint32) string {
	switch {
	case prog == nfs3.Program && vers == nfs3.Version && proc < nfs3.NumProcs:
		return nfs3.ProcName(proc)
	case prog == mount3.Program && vers == mount3.Version && proc < mount3.NumProcs:
		return mount3.ProcName(proc)
	}
	return strconv.FormatUint(uint64(proc), 10)
}

// knownProc maps an NFSv3 or MOUNT v3 call to a dense index (NFS
// procedures first, then MOUNT's), for label caches; ok is false for any
// other call.
func knownProc(prog, vers, proc uint32) (i int, ok bool) {
	switch {
	case prog == nfs3.Program && vers == nfs3.Version && proc < nfs3.NumProcs:
		return int(proc), true
	case prog == mount3.Program && vers == mount3.Version && proc < mount3.NumProcs:
		return nfs3.NumProcs + int(proc), true
	}
	return 0, false
}

const numKnownProcs = nfs3.NumProcs + mount3.NumProcs

// transportIndex maps a sunrpc.Request.Transport to a label cache index;
// ok is false for a transport other than "tcp" and "rdma".
func transportIndex(t string) (int, bool) {
	switch t {
	case "tcp":
		return 0, true
	case "rdma":
		return 1, true
	}
	return 0, false
}

const numTransports = 2

// LatencyBuckets are the upper bounds, in seconds, of the RPC and CSI
// latency histograms: 25 µs to about 13 s, doubling (20 buckets), from a
// GETATTR answered from memory to a COMMIT of a large file or a slow CSI
// call.
var LatencyBuckets = prometheus.ExponentialBuckets(25e-6, 2, 20)
