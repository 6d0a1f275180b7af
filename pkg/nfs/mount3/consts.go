package mount3

import "strconv"

// RPC program and version of MOUNT v3 (RFC 1813 section 5).
const (
	Program = 100005
	Version = 3
)

// Port is the TCP port MOUNT v3 is served on by default (IANA
// "mountd"). The protocol has no fixed port (clients ask rpcbind,
// RFC 1813 section 5); 20048 is the one Linux rpc.mountd uses.
const Port = 20048

// Procedure numbers (RFC 1813 section 5.2).
const (
	ProcNull    = 0 // MOUNTPROC3_NULL: void -> void
	ProcMnt     = 1 // MOUNTPROC3_MNT: dirpath -> mountres3
	ProcDump    = 2 // MOUNTPROC3_DUMP: void -> mountlist
	ProcUmnt    = 3 // MOUNTPROC3_UMNT: dirpath -> void
	ProcUmntAll = 4 // MOUNTPROC3_UMNTALL: void -> void
	ProcExport  = 5 // MOUNTPROC3_EXPORT: void -> exports

	// NumProcs is the number of MOUNT v3 procedures.
	NumProcs = 6
)

var procNames = [NumProcs]string{"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"}

// ProcName returns the RFC 1813 name of procedure proc ("MNT"), or
// "PROC(n)" for a number outside the program.
func ProcName(proc uint32) string {
	if proc < NumProcs {
		return procNames[proc]
	}
	return "PROC(" + strconv.FormatUint(uint64(proc), 10) + ")"
}

// Sizes (RFC 1813 section 5.1.4).
const (
	// MaxPathLen is MNTPATHLEN, the longest dirpath, 1024 bytes.
	MaxPathLen = 1024
	// MaxNameLen is MNTNAMLEN, the longest name (host or group), 255 bytes.
	MaxNameLen = 255
	// FHSize is FHSIZE3, the longest fhandle3, 64 bytes.
	FHSize = 64
)
