package nlm

import "strconv"

// RPC program and version of NLM v4 (X/Open XNFS chapter 14).
const (
	Program = 100021
	Version = 4
)

// Port is the TCP port NLM v4 is given when it has a fixed one: 4045, the
// port of Solaris lockd and of Linux lockd with nlm_tcpport=4045. The
// protocol has no assigned port; clients ask rpcbind (X/Open XNFS).
const Port = 4045

// Procedure numbers of NLM v4 (X/Open XNFS section 14.2; NSM_NOTIFY from
// Linux include/linux/lockd/xdr4.h, NLMPROC_NSM_NOTIFY).
const (
	ProcNull       = 0  // NLMPROC4_NULL: void -> void
	ProcTest       = 1  // NLMPROC4_TEST: nlm4_testargs -> nlm4_testres
	ProcLock       = 2  // NLMPROC4_LOCK: nlm4_lockargs -> nlm4_res
	ProcCancel     = 3  // NLMPROC4_CANCEL: nlm4_cancargs -> nlm4_res
	ProcUnlock     = 4  // NLMPROC4_UNLOCK: nlm4_unlockargs -> nlm4_res
	ProcGranted    = 5  // NLMPROC4_GRANTED: nlm4_testargs -> nlm4_res (server to client)
	ProcTestMsg    = 6  // NLMPROC4_TEST_MSG: nlm4_testargs -> void
	ProcLockMsg    = 7  // NLMPROC4_LOCK_MSG: nlm4_lockargs -> void
	ProcCancelMsg  = 8  // NLMPROC4_CANCEL_MSG: nlm4_cancargs -> void
	ProcUnlockMsg  = 9  // NLMPROC4_UNLOCK_MSG: nlm4_unlockargs -> void
	ProcGrantedMsg = 10 // NLMPROC4_GRANTED_MSG: nlm4_testargs -> void
	ProcTestRes    = 11 // NLMPROC4_TEST_RES: nlm4_testres -> void
	ProcLockRes    = 12 // NLMPROC4_LOCK_RES: nlm4_res -> void
	ProcCancelRes  = 13 // NLMPROC4_CANCEL_RES: nlm4_res -> void
	ProcUnlockRes  = 14 // NLMPROC4_UNLOCK_RES: nlm4_res -> void
	ProcGrantedRes = 15 // NLMPROC4_GRANTED_RES: nlm4_res -> void
	ProcNSMNotify  = 16 // Linux lockd's SM_MON callback: status (SMStatus) -> void
	ProcShare      = 20 // NLMPROC4_SHARE: nlm4_shareargs -> nlm4_shareres
	ProcUnshare    = 21 // NLMPROC4_UNSHARE: nlm4_shareargs -> nlm4_shareres
	ProcNMLock     = 22 // NLMPROC4_NM_LOCK: nlm4_lockargs -> nlm4_res
	ProcFreeAll    = 23 // NLMPROC4_FREE_ALL: nlm4_notify -> void

	// NumProcs is one more than the highest procedure number (17..19 are
	// unused).
	NumProcs = 24
)

var procNames = [NumProcs]string{
	"NULL", "TEST", "LOCK", "CANCEL", "UNLOCK", "GRANTED",
	"TEST_MSG", "LOCK_MSG", "CANCEL_MSG", "UNLOCK_MSG", "GRANTED_MSG",
	"TEST_RES", "LOCK_RES", "CANCEL_RES", "UNLOCK_RES", "GRANTED_RES",
	"NSM_NOTIFY", "", "", "", "SHARE", "UNSHARE", "NM_LOCK", "FREE_ALL",
}

// ProcName returns the X/Open name of procedure proc without its prefix
// ("LOCK"), or "PROC(n)" for a number outside the program.
func ProcName(proc uint32) string {
	if proc < NumProcs && procNames[proc] != "" {
		return procNames[proc]
	}
	return "PROC(" + strconv.FormatUint(uint64(proc), 10) + ")"
}

// Sizes (X/Open XNFS section 14.1; Linux include/linux/lockd/xdr.h).
const (
	// MaxStrLen is LM_MAXSTRLEN, the longest caller_name, 1024 bytes.
	MaxStrLen = 1024
	// MaxNetobjSize is MAXNETOBJ_SZ, the longest netobj (cookie, fh, oh),
	// 1024 bytes.
	MaxNetobjSize = 1024
	// SMPrivSize is SM_PRIV_SIZE, the opaque private data NSM hands back
	// in NSM_NOTIFY, 16 bytes.
	SMPrivSize = 16
)
