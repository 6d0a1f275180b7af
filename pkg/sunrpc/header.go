package sunrpc

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// RPCVersion is the only RPC protocol version (rpcvers) this package speaks
// (RFC 5531 section 9).
const RPCVersion = 2

// MaxAuthBytes is the largest opaque_auth body (RFC 5531 section 8.2).
const MaxAuthBytes = 400

// MsgType is msg_type (RFC 5531 section 9).
type MsgType uint32

// msg_type values.
const (
	MsgCall  MsgType = 0
	MsgReply MsgType = 1
)

// ReplyStat is reply_stat (RFC 5531 section 9).
type ReplyStat uint32

// reply_stat values.
const (
	MsgAccepted ReplyStat = 0
	MsgDenied   ReplyStat = 1
)

// AcceptStat is accept_stat, the status of an accepted call (RFC 5531 section 9).
type AcceptStat uint32

// accept_stat values.
const (
	Success      AcceptStat = 0 // RPC executed successfully
	ProgUnavail  AcceptStat = 1 // remote hasn't exported the program
	ProgMismatch AcceptStat = 2 // remote can't support the version number
	ProcUnavail  AcceptStat = 3 // program can't support the procedure
	GarbageArgs  AcceptStat = 4 // procedure can't decode the params
	SystemErr    AcceptStat = 5 // e.g. memory allocation failure
)

var acceptStatNames = [...]string{"SUCCESS", "PROG_UNAVAIL", "PROG_MISMATCH", "PROC_UNAVAIL", "GARBAGE_ARGS", "SYSTEM_ERR"}

func (s AcceptStat) String() string {
	if int(s) < len(acceptStatNames) {
		return acceptStatNames[s]
	}
	return fmt.Sprintf("accept_stat(%d)", uint32(s))
}

// RejectStat is reject_stat, why a call was denied (RFC 5531 section 9).
type RejectStat uint32

// reject_stat values.
const (
	RejectRPCMismatch RejectStat = 0 // RPC version number != 2
	RejectAuthError   RejectStat = 1 // remote can't authenticate caller
)

// AuthStat is auth_stat, why authentication failed (RFC 5531 section 9).
type AuthStat uint32

// auth_stat values.
const (
	AuthOK               AuthStat = 0  // success
	AuthBadCred          AuthStat = 1  // bad credential (seal broken)
	AuthRejectedCred     AuthStat = 2  // client must begin new session
	AuthBadVerf          AuthStat = 3  // bad verifier (seal broken)
	AuthRejectedVerf     AuthStat = 4  // verifier expired or replayed
	AuthTooWeak          AuthStat = 5  // rejected for security reasons
	AuthInvalidResp      AuthStat = 6  // bogus response verifier
	AuthFailed           AuthStat = 7  // reason unknown
	AuthKerbGeneric      AuthStat = 8  // kerberos generic error
	AuthTimeExpire       AuthStat = 9  // time of credential expired
	AuthTktFile          AuthStat = 10 // problem with ticket file
	AuthDecode           AuthStat = 11 // can't decode authenticator
	AuthNetAddr          AuthStat = 12 // wrong net address in ticket
	RPCSecGSSCredProblem AuthStat = 13 // no credentials for user
	RPCSecGSSCtxProblem  AuthStat = 14 // problem with context
)

var authStatNames = [...]string{"AUTH_OK", "AUTH_BADCRED", "AUTH_REJECTEDCRED", "AUTH_BADVERF",
	"AUTH_REJECTEDVERF", "AUTH_TOOWEAK", "AUTH_INVALIDRESP", "AUTH_FAILED", "AUTH_KERB_GENERIC",
	"AUTH_TIMEEXPIRE", "AUTH_TKT_FILE", "AUTH_DECODE", "AUTH_NET_ADDR",
	"RPCSEC_GSS_CREDPROBLEM", "RPCSEC_GSS_CTXPROBLEM"}

func (s AuthStat) String() string {
	if int(s) < len(authStatNames) {
		return authStatNames[s]
	}
	return fmt.Sprintf("auth_stat(%d)", uint32(s))
}

// AuthFlavor is auth_flavor (RFC 5531 section 8.2 and appendix A).
type AuthFlavor uint32

// auth_flavor values.
const (
	AuthNone  AuthFlavor = 0 // AUTH_NONE (RFC 5531 appendix A)
	AuthSys   AuthFlavor = 1 // AUTH_SYS, a.k.a. AUTH_UNIX (RFC 5531 appendix A)
	AuthShort AuthFlavor = 2 // AUTH_SHORT
	AuthDH    AuthFlavor = 3 // AUTH_DH
	RPCSecGSS AuthFlavor = 6 // RPCSEC_GSS (RFC 2203)
	AuthTLS   AuthFlavor = 7 // AUTH_TLS, the STARTTLS probe of RPC-with-TLS (RFC 9289 section 4.1)
)

func (f AuthFlavor) String() string {
	switch f {
	case AuthNone:
		return "AUTH_NONE"
	case AuthSys:
		return "AUTH_SYS"
	case AuthShort:
		return "AUTH_SHORT"
	case AuthDH:
		return "AUTH_DH"
	case RPCSecGSS:
		return "RPCSEC_GSS"
	case AuthTLS:
		return "AUTH_TLS"
	}
	return fmt.Sprintf("auth_flavor(%d)", uint32(f))
}

// OpaqueAuth is opaque_auth: a flavor and a body of at most MaxAuthBytes
// bytes (RFC 5531 section 8.2). A decoded Body aliases the input.
type OpaqueAuth struct {
	Flavor AuthFlavor
	Body   []byte
}

// Encode appends a to e. A Body longer than MaxAuthBytes is encoded as
// given; the encoders in this package never build one.
func (a *OpaqueAuth) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(a.Flavor))
	e.Opaque(a.Body)
}

// decodeOpaqueAuth reads an opaque_auth; the body may be at most MaxAuthBytes.
func decodeOpaqueAuth(d *xdr.Decoder) OpaqueAuth {
	f := AuthFlavor(d.Uint32())
	return OpaqueAuth{Flavor: f, Body: d.Opaque(MaxAuthBytes)}
}

// CallHeader is the RPC message header of a call: xid, msg_type CALL and
// call_body up to and including the verifier (RFC 5531 section 9). The
// procedure's arguments follow it.
type CallHeader struct {
	XID              uint32
	RPCVers          uint32 // RPCVersion in every call this package sends
	Prog, Vers, Proc uint32
	Cred, Verf       OpaqueAuth
}

// Encode appends h to e: 10 words plus the two auth bodies.
func (h *CallHeader) Encode(e *xdr.Encoder) {
	e.Uint32(h.XID)
	e.Uint32(uint32(MsgCall))
	e.Uint32(h.RPCVers)
	e.Uint32(h.Prog)
	e.Uint32(h.Vers)
	e.Uint32(h.Proc)
	h.Cred.Encode(e)
	h.Verf.Encode(e)
}

// DecodeCallHeader reads a call header from d, leaving d at the first byte
// of the arguments. Cred.Body and Verf.Body alias d's input. Errors:
//
//   - wraps ErrMalformed when the bytes up to proc are not a call (too short,
//     msg_type not CALL): RFC 5531 gives no reply to such a message;
//   - a *MismatchError (ErrRPCMismatch, Low = High = 2) when rpcvers != 2;
//     h.XID and h.RPCVers are valid, nothing after rpcvers is read;
//   - an *AuthError with AuthBadCred (AuthBadVerf) when the credential
//     (verifier) is truncated or longer than MaxAuthBytes (RFC 5531 section
//     8.2); h.XID, Prog, Vers and Proc are valid.
func DecodeCallHeader(d *xdr.Decoder) (CallHeader, error) {
	var h CallHeader
	h.XID = d.Uint32()
	mt := d.Uint32()
	h.RPCVers = d.Uint32()
	if err := d.Err(); err != nil {
		return h, fmt.Errorf("%w: call header: %w", ErrMalformed, err)
	}
	if MsgType(mt) != MsgCall {
		return h, fmt.Errorf("%w: msg_type %d is not CALL", ErrMalformed, mt)
	}
	if h.RPCVers != RPCVersion {
		return h, &MismatchError{Err: ErrRPCMismatch, Low: RPCVersion, High: RPCVersion}
	}
	h.Prog = d.Uint32()
	h.Vers = d.Uint32()
	h.Proc = d.Uint32()
	if err := d.Err(); err != nil {
		return h, fmt.Errorf("%w: call header: %w", ErrMalformed, err)
	}
	h.Cred = decodeOpaqueAuth(d)
	if err := d.Err(); err != nil {
		return h, &AuthError{Stat: AuthBadCred, Err: fmt.Errorf("%w: credential: %w", ErrMalformed, err)}
	}
	h.Verf = decodeOpaqueAuth(d)
	if err := d.Err(); err != nil {
		return h, &AuthError{Stat: AuthBadVerf, Err: fmt.Errorf("%w: verifier: %w", ErrMalformed, err)}
	}
	return h, nil
}

// ReplyHeader is the RPC message header of a reply (RFC 5531 section 9):
// xid, msg_type REPLY and reply_body up to the results. Which fields are
// meaningful depends on Stat:
//
//   - MsgAccepted: Verf and Accept; Low and High when Accept is ProgMismatch.
//     The procedure's results follow a Success header.
//   - MsgDenied: Reject; Low and High for RejectRPCMismatch, Auth for
//     RejectAuthError.
type ReplyHeader struct {
	XID       uint32
	Stat      ReplyStat
	Verf      OpaqueAuth
	Accept    AcceptStat
	Reject    RejectStat
	Low, High uint32
	Auth      AuthStat
}

// Encode appends h to e.
func (h *ReplyHeader) Encode(e *xdr.Encoder) {
	e.Uint32(h.XID)
	e.Uint32(uint32(MsgReply))
	e.Uint32(uint32(h.Stat))
	if h.Stat == MsgAccepted {
		h.Verf.Encode(e)
		e.Uint32(uint32(h.Accept))
		if h.Accept == ProgMismatch {
			e.Uint32(h.Low)
			e.Uint32(h.High)
		}
		return
	}
	e.Uint32(uint32(h.Reject))
	switch h.Reject {
	case RejectRPCMismatch:
		e.Uint32(h.Low)
		e.Uint32(h.High)
	case RejectAuthError:
		e.Uint32(uint32(h.Auth))
	}
}

// DecodeReplyHeader reads a reply header from d, leaving d at the first byte
// of the results. Verf.Body aliases d's input. Errors wrap ErrMalformed (and
// the xdr error, if any) when the bytes are not a reply header: too short,
// msg_type not REPLY, an unknown reply_stat, accept_stat or reject_stat, a
// verifier over MaxAuthBytes. A well-formed header reporting a failure is not
// an error here: see Err.
func DecodeReplyHeader(d *xdr.Decoder) (ReplyHeader, error) {
	var h ReplyHeader
	h.XID = d.Uint32()
	mt := d.Uint32()
	h.Stat = ReplyStat(d.Uint32())
	if err := d.Err(); err != nil {
		return h, fmt.Errorf("%w: reply header: %w", ErrMalformed, err)
	}
	if MsgType(mt) != MsgReply {
		return h, fmt.Errorf("%w: msg_type %d is not REPLY", ErrMalformed, mt)
	}
	switch h.Stat {
	case MsgAccepted:
		h.Verf = decodeOpaqueAuth(d)
		h.Accept = AcceptStat(d.Uint32())
		if h.Accept > SystemErr {
			d.SetErr(fmt.Errorf("%w: accept_stat %d", xdr.ErrBadDiscriminant, h.Accept))
		}
		if h.Accept == ProgMismatch {
			h.Low = d.Uint32()
			h.High = d.Uint32()
		}
	case MsgDenied:
		h.Reject = RejectStat(d.Uint32())
		switch h.Reject {
		case RejectRPCMismatch:
			h.Low = d.Uint32()
			h.High = d.Uint32()
		case RejectAuthError:
			h.Auth = AuthStat(d.Uint32())
		default:
			d.SetErr(fmt.Errorf("%w: reject_stat %d", xdr.ErrBadDiscriminant, h.Reject))
		}
	default:
		d.SetErr(fmt.Errorf("%w: reply_stat %d", xdr.ErrBadDiscriminant, h.Stat))
	}
	if err := d.Err(); err != nil {
		return h, fmt.Errorf("%w: reply header: %w", ErrMalformed, err)
	}
	return h, nil
}

// Err returns nil for an accepted SUCCESS reply and otherwise the error the
// reply reports: ErrProgUnavail, ErrProcUnavail, ErrGarbageArgs,
// ErrSystemErr, a *MismatchError (ErrProgMismatch, ErrRPCMismatch) or an
// *AuthError.
func (h *ReplyHeader) Err() error {
	if h.Stat == MsgAccepted {
		switch h.Accept {
		case Success:
			return nil
		case ProgUnavail:
			return ErrProgUnavail
		case ProgMismatch:
			return &MismatchError{Err: ErrProgMismatch, Low: h.Low, High: h.High}
		case ProcUnavail:
			return ErrProcUnavail
		case GarbageArgs:
			return ErrGarbageArgs
		case SystemErr:
			return ErrSystemErr
		}
		return fmt.Errorf("%w: accept_stat %d", ErrMalformed, h.Accept)
	}
	switch h.Reject {
	case RejectRPCMismatch:
		return &MismatchError{Err: ErrRPCMismatch, Low: h.Low, High: h.High}
	case RejectAuthError:
		return &AuthError{Stat: h.Auth}
	}
	return fmt.Errorf("%w: reject_stat %d", ErrMalformed, h.Reject)
}

// acceptedReply returns the header of an accepted reply with an AUTH_NONE verifier.
func acceptedReply(xid uint32, stat AcceptStat) ReplyHeader {
	return ReplyHeader{XID: xid, Stat: MsgAccepted, Accept: stat}
}
