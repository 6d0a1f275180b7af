// Package nsm is the XDR codec of the Network Status Monitor protocol
// version 1 (program 100024 version 1, X/Open CAE Specification C702
// "Protocols for Interworking: XNFS, Version 3W", chapter 11 "SM: Status
// Monitor protocol"), both directions. NSM tells a lock manager when a
// peer host reboots, so that it frees the locks the peer held (server
// side) or reclaims its locks (client side).
//
// Each XDR structure is a Go type with
//
//	Encode(e *xdr.Encoder)
//	Decode(d *xdr.Decoder) error
//
// Decode returns the xdr package's sentinel errors on malformed input.
//
// The arguments and results of the procedures:
//
//	SM_NULL        void     -> void
//	SM_STAT        SMName   -> StatRes
//	SM_MON         Mon      -> StatRes
//	SM_UNMON       MonID    -> Stat
//	SM_UNMON_ALL   MyID     -> Stat
//	SM_SIMU_CRASH  void     -> void
//	SM_NOTIFY      StatChge -> void
//
// When a monitored host's state changes, the NSM calls the procedure
// MyID names (my_prog, my_vers, my_proc; for Linux lockd NLM v4's
// NSM_NOTIFY) with mon_name, the new state and Mon's 16 private bytes:
// package nlm's SMStatus.
package nsm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// Message is implemented by every argument and result type of the package.
type Message interface {
	Encode(e *xdr.Encoder)
	Decode(d *xdr.Decoder) error
}
