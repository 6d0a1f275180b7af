package nfs3

import (
	"math"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Encoded sizes, in bytes, of the fixed-size items and the largest
// encodings of the variable ones (RFC 1813 section 2.5).
const (
	FattrSize         = 84                                   // fattr3
	PostOpAttrMaxSize = 4 + FattrSize                        // post_op_attr: 88
	WccAttrSize       = 24                                   // wcc_attr
	PreOpAttrMaxSize  = 4 + WccAttrSize                      // pre_op_attr: 28
	WccDataMaxSize    = PreOpAttrMaxSize + PostOpAttrMaxSize // wcc_data: 116
	FHMaxSize         = 4 + FHSize                           // nfs_fh3: 68
	PostOpFHMaxSize   = 4 + FHMaxSize                        // post_op_fh3: 72
	SattrMaxSize      = 8 + 8 + 8 + 12 + 12 + 12             // sattr3: 60
)

// Largest result of each procedure that does not depend on the arguments,
// status included, DDP-eligible item excluded (its length word included).
// These are the exact maxima of RFC 1813's XDR; Linux fs/nfs/nfs3xdr.c
// NFS3_*res_sz are the same in 4-byte words.
var maxResult = [NumProcs]int{
	ProcNull:     0,
	ProcGetattr:  4 + FattrSize,                                            // 88
	ProcSetattr:  4 + WccDataMaxSize,                                       // 120
	ProcLookup:   4 + FHMaxSize + 2*PostOpAttrMaxSize,                      // 248
	ProcAccess:   4 + PostOpAttrMaxSize + 4,                                // 96
	ProcReadlink: 4 + PostOpAttrMaxSize + 4,                                // 96 + path
	ProcRead:     4 + PostOpAttrMaxSize + 4 + 4 + 4,                        // 104 + data
	ProcWrite:    4 + WccDataMaxSize + 4 + 4 + WriteVerfSize,               // 136
	ProcCreate:   4 + PostOpFHMaxSize + PostOpAttrMaxSize + WccDataMaxSize, // 280
	ProcMkdir:    4 + PostOpFHMaxSize + PostOpAttrMaxSize + WccDataMaxSize, // 280
	ProcSymlink:  4 + PostOpFHMaxSize + PostOpAttrMaxSize + WccDataMaxSize, // 280
	ProcMknod:    4 + PostOpFHMaxSize + PostOpAttrMaxSize + WccDataMaxSize, // 280
	ProcRemove:   4 + WccDataMaxSize,                                       // 120
	ProcRmdir:    4 + WccDataMaxSize,                                       // 120
	ProcRename:   4 + 2*WccDataMaxSize,                                     // 236
	ProcLink:     4 + PostOpAttrMaxSize + WccDataMaxSize,                   // 208
	// READDIR, READDIRPLUS: the header; see dirResultSize.
	ProcReaddir:     4 + PostOpAttrMaxSize + CookieVerfSize + 4 + 4, // 108 + entries
	ProcReaddirplus: 4 + PostOpAttrMaxSize + CookieVerfSize + 4 + 4, // 108 + entries
	ProcFsstat:      4 + PostOpAttrMaxSize + 6*8 + 4,                // 144
	ProcFsinfo:      4 + PostOpAttrMaxSize + 7*4 + 8 + 8 + 4,        // 140
	ProcPathconf:    4 + PostOpAttrMaxSize + 2*4 + 4*4,              // 116
	ProcCommit:      4 + WccDataMaxSize + WriteVerfSize,             // 128
}

// MaxResultSize returns the largest XDR encoding, in bytes, of the result
// of procedure proc: the status and everything after it, without the RPC
// reply header, and without the bytes of the DDP-eligible item of READ and
// READLINK (their length word is counted; add MaxResultDDPSize for an
// unreduced reply). A requester compares it (plus the reply header) with
// the inline threshold to decide whether to provide a Reply chunk (RFC 8267
// section 4.1, RFC 8166 section 3.5).
//
// args is needed only for READDIR (*ReaddirArgs or ReaddirArgs) and
// READDIRPLUS (*ReaddirplusArgs or ReaddirplusArgs), whose results are
// bounded by count and maxcount; for every other procedure it is ignored
// and may be nil. It returns -1 for an unknown procedure or a missing
// READDIR(PLUS) argument.
//
// For READDIR(PLUS) the bound is 108 + RoundUp(count) bytes: it holds both
// for servers that keep the whole resok within count (RFC 1813, and
// ReaddirRes here) and for those that apply count to the entries alone
// (Linux knfsd).
func MaxResultSize(proc uint32, args any) int {
	if proc >= NumProcs {
		return -1
	}
	switch proc {
	case ProcReaddir:
		switch a := args.(type) {
		case *ReaddirArgs:
			if a != nil {
				return a.MaxResultSize()
			}
		case ReaddirArgs:
			return a.MaxResultSize()
		}
		return -1
	case ProcReaddirplus:
		switch a := args.(type) {
		case *ReaddirplusArgs:
			if a != nil {
				return a.MaxResultSize()
			}
		case ReaddirplusArgs:
			return a.MaxResultSize()
		}
		return -1
	}
	return maxResult[proc]
}

// MaxResultDDPSize returns the largest size, in bytes, of the DDP-eligible
// item of proc's result, XDR padding included: RoundUp(count) for READ
// (args *ReadArgs or ReadArgs; -1 without them), RoundUp(MaxPathLen) for
// READLINK, 0 for every other procedure, -1 for an unknown one. It is the
// size of the Write chunk a requester provides.
func MaxResultDDPSize(proc uint32, args any) int {
	switch {
	case proc >= NumProcs:
		return -1
	case proc == ProcReadlink:
		return xdr.RoundUp(MaxPathLen)
	case proc != ProcRead:
		return 0
	}
	switch a := args.(type) {
	case *ReadArgs:
		if a != nil {
			return a.MaxResultDDPSize()
		}
	case ReadArgs:
		return a.MaxResultDDPSize()
	}
	return -1
}

// MaxResultSize returns the largest READ3res without its data bytes, 104.
func (a *ReadArgs) MaxResultSize() int { return maxResult[ProcRead] }

// MaxResultDDPSize returns the largest READ data item with padding, RoundUp(Count).
func (a *ReadArgs) MaxResultDDPSize() int { return roundUp64(uint64(a.Count)) }

// MaxResultSize returns the largest READDIR3res for a's count:
// 108 + RoundUp(Count) bytes (see the function MaxResultSize).
func (a *ReaddirArgs) MaxResultSize() int { return dirResultSize(a.Count) }

// MaxResultSize returns the largest READDIRPLUS3res for a's maxcount:
// 108 + RoundUp(MaxCount) bytes (see the function MaxResultSize).
func (a *ReaddirplusArgs) MaxResultSize() int { return dirResultSize(a.MaxCount) }

func dirResultSize(count uint32) int {
	n := uint64(maxResult[ProcReaddir]) + uint64(roundUp64(uint64(count)))
	if n > math.MaxInt {
		return math.MaxInt
	}
	return int(n)
}

func roundUp64(n uint64) int {
	n = (n + 3) &^ 3
	if n > math.MaxInt {
		return math.MaxInt
	}
	return int(n)
}
