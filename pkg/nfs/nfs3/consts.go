package nfs3

import "strconv"

// RPC program and version of NFSv3 (RFC 1813 section 3).
const (
	Program = 100003
	Version = 3
)

// Well-known ports, the one definition in this repository of each.
const (
	// Port is NFS over TCP (IANA "nfs"; RFC 1813 section 3.3 leaves
	// the port to rpcbind, every client and server uses 2049).
	Port = 2049
	// RDMAPort is NFS over RPC-over-RDMA (IANA "nfsrdma"): an NFSv3
	// client may use it without asking rpcbind (RFC 8267 section 4.2,
	// "RPC Binding"); NFSv4 clients must (RFC 8267 section 6.3).
	RDMAPort = 20049
)

// Procedure numbers (RFC 1813 section 3.3).
const (
	ProcNull        = 0
	ProcGetattr     = 1
	ProcSetattr     = 2
	ProcLookup      = 3
	ProcAccess      = 4
	ProcReadlink    = 5
	ProcRead        = 6
	ProcWrite       = 7
	ProcCreate      = 8
	ProcMkdir       = 9
	ProcSymlink     = 10
	ProcMknod       = 11
	ProcRemove      = 12
	ProcRmdir       = 13
	ProcRename      = 14
	ProcLink        = 15
	ProcReaddir     = 16
	ProcReaddirplus = 17
	ProcFsstat      = 18
	ProcFsinfo      = 19
	ProcPathconf    = 20
	ProcCommit      = 21

	// NumProcs is the number of NFSv3 procedures; valid numbers are 0..NumProcs-1.
	NumProcs = 22
)

var procNames = [NumProcs]string{
	"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ",
	"WRITE", "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR",
	"RENAME", "LINK", "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO",
	"PATHCONF", "COMMIT",
}

// ProcName returns the RFC 1813 name of procedure proc ("GETATTR"), or
// "PROC(n)" for a number outside the program.
func ProcName(proc uint32) string {
	if proc < NumProcs {
		return procNames[proc]
	}
	return "PROC(" + strconv.FormatUint(uint64(proc), 10) + ")"
}

// Sizes (RFC 1813 section 2.4).
const (
	// FHSize is NFS3_FHSIZE, the largest file handle, 64 bytes.
	FHSize = 64
	// CookieVerfSize is NFS3_COOKIEVERFSIZE, 8 bytes.
	CookieVerfSize = 8
	// CreateVerfSize is NFS3_CREATEVERFSIZE, 8 bytes.
	CreateVerfSize = 8
	// WriteVerfSize is NFS3_WRITEVERFSIZE, 8 bytes.
	WriteVerfSize = 8
)

// Decoder limits. RFC 1813 leaves filename3 and nfspath3 unbounded; these
// are the limits of Linux (NFS3_MAXNAMLEN, NFS3_MAXPATHLEN).
const (
	// MaxNameLen is the longest filename3 accepted by decoders, 255 bytes.
	MaxNameLen = 255
	// MaxPathLen is the longest nfspath3 (symbolic link target) accepted by
	// decoders, 4096 bytes (Linux PATH_MAX; Linux servers store link
	// targets up to 4095 bytes).
	MaxPathLen = 4096
	// DefaultMaxData is the largest READ or WRITE data item accepted by
	// ReadRes.Decode and WriteArgs.Decode, 1 MiB (the largest rsize/wsize
	// of Linux knfsd and of the Linux NFSv3 client). Use DecodeMax for
	// another limit.
	DefaultMaxData = 1 << 20
)

// ACCESS permission bits (RFC 1813 section 3.3.4).
const (
	AccessRead    = 0x0001 // ACCESS3_READ: read data or list a directory
	AccessLookup  = 0x0002 // ACCESS3_LOOKUP: look up a name in a directory
	AccessModify  = 0x0004 // ACCESS3_MODIFY: rewrite data or directory entries
	AccessExtend  = 0x0008 // ACCESS3_EXTEND: write new data or add entries
	AccessDelete  = 0x0010 // ACCESS3_DELETE: delete an existing directory entry
	AccessExecute = 0x0020 // ACCESS3_EXECUTE: execute a file
)

// FSINFO properties bits (RFC 1813 section 3.3.19).
const (
	FSFLink        = 0x0001 // FSF3_LINK: hard links supported
	FSFSymlink     = 0x0002 // FSF3_SYMLINK: symbolic links supported
	FSFHomogeneous = 0x0008 // FSF3_HOMOGENEOUS: PATHCONF is the same for every file
	FSFCanSetTime  = 0x0010 // FSF3_CANSETTIME: server can set times via SETATTR
)

// mode3 bits (RFC 1813 section 2.5, fattr3 mode).
const (
	ModeSetUID   = 0x800 // set user ID on execution
	ModeSetGID   = 0x400 // set group ID on execution
	ModeSticky   = 0x200 // save swapped text (sticky bit)
	ModeUserR    = 0x100 // read permission for owner
	ModeUserW    = 0x080 // write permission for owner
	ModeUserX    = 0x040 // execute or search permission for owner
	ModeGroupR   = 0x020 // read permission for group
	ModeGroupW   = 0x010 // write permission for group
	ModeGroupX   = 0x008 // execute or search permission for group
	ModeOtherR   = 0x004 // read permission for others
	ModeOtherW   = 0x002 // write permission for others
	ModeOtherX   = 0x001 // execute or search permission for others
	ModePermMask = 0xfff // all of the above
)
