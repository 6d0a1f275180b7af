package nsm

import "strconv"

// RPC program and version of NSM (X/Open XNFS chapter 11).
const (
	Program = 100024
	Version = 1
)

// Procedure numbers (X/Open XNFS chapter 11).
const (
	ProcNull      = 0 // SM_NULL: void -> void
	ProcStat      = 1 // SM_STAT: sm_name -> sm_stat_res
	ProcMon       = 2 // SM_MON: mon -> sm_stat_res
	ProcUnmon     = 3 // SM_UNMON: mon_id -> sm_stat
	ProcUnmonAll  = 4 // SM_UNMON_ALL: my_id -> sm_stat
	ProcSimuCrash = 5 // SM_SIMU_CRASH: void -> void
	ProcNotify    = 6 // SM_NOTIFY: stat_chge -> void

	// NumProcs is the number of NSM v1 procedures.
	NumProcs = 7
)

var procNames = [NumProcs]string{"NULL", "STAT", "MON", "UNMON", "UNMON_ALL", "SIMU_CRASH", "NOTIFY"}

// ProcName returns the X/Open name of procedure proc without its "SM_"
// prefix ("MON"), or "PROC(n)" for a number outside the program.
func ProcName(proc uint32) string {
	if proc < NumProcs {
		return procNames[proc]
	}
	return "PROC(" + strconv.FormatUint(uint64(proc), 10) + ")"
}

// Sizes (X/Open XNFS chapter 11).
const (
	// MaxStrLen is SM_MAXSTRLEN, the longest host name, 1024 bytes.
	MaxStrLen = 1024
	// PrivSize is the length of Mon's private data, 16 bytes.
	PrivSize = 16
)

// Res is sm_res, the outcome of SM_STAT and SM_MON.
type Res uint32

// sm_res values.
const (
	StatSucc Res = 0 // stat_succ: the NSM monitors the host
	StatFail Res = 1 // stat_fail: it does not
)

// String returns "stat_succ", "stat_fail" or "sm_res(n)".
func (r Res) String() string {
	switch r {
	case StatSucc:
		return "stat_succ"
	case StatFail:
		return "stat_fail"
	}
	return "sm_res(" + strconv.FormatUint(uint64(r), 10) + ")"
}
