// Package nlm is the XDR codec of the Network Lock Manager protocol version 4
// (program 100021 version 4, X/Open CAE Specification C702 "Protocols for
// Interworking: XNFS, Version 3W", chapter 14 "NLM: Network Lock Manager
// protocol version 4"), both directions. RFC 8267 section 5.1 carries NLM
// over TCP even when NFS runs over RDMA, so nothing here is DDP-eligible.
//
// Naming follows packages nfs3 and mount3: each XDR structure is a Go type
// with
//
//	Encode(e *xdr.Encoder)
//	Decode(d *xdr.Decoder) error
//
// Decode returns the xdr package's sentinel errors (xdr.ErrShort,
// xdr.ErrTooLong, xdr.ErrBadBool) on malformed input; opaque items (cookie,
// fh, oh, the NSM private data) are copied out of the input, so a decoded
// value may be kept after the input buffer is reused.
//
// The arguments and results of the procedures:
//
//	NULL                       void      -> void
//	TEST, TEST_MSG             TestArgs  -> TestRes   (TEST_RES carries a TestRes)
//	LOCK, LOCK_MSG             LockArgs  -> Res       (LOCK_RES carries a Res)
//	CANCEL, CANCEL_MSG         CancArgs  -> Res       (CANCEL_RES carries a Res)
//	UNLOCK, UNLOCK_MSG         UnlockArgs-> Res       (UNLOCK_RES carries a Res)
//	GRANTED, GRANTED_MSG       TestArgs  -> Res       (GRANTED_RES carries a Res)
//	SHARE, UNSHARE             ShareArgs -> ShareRes
//	NM_LOCK                    LockArgs  -> Res
//	FREE_ALL                   NotifyArgs-> void
//	NSM_NOTIFY (Linux lockd)   SMStatus  -> void
//
// The *_MSG and *_RES procedures are one-way: they return void and their
// result travels as a call of the matching *_RES procedure back to the
// caller. NSM_NOTIFY (16) is not in X/Open; it is the procedure Linux's
// rpc.statd calls on the local lockd (the my_prog/my_vers/my_proc of
// SM_MON) when a monitored host reboots.
//
// Stat (nlm4_stats) implements error, with Errno mapping each value to the
// errno Linux's NLM client returns for it (fs/lockd/clntproc.c
// nlm_stat_to_errno).
package nlm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// Message is implemented by every argument and result type of the package.
type Message interface {
	Encode(e *xdr.Encoder)
	Decode(d *xdr.Decoder) error
}
