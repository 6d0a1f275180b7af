package sunrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Handler runs one procedure. It decodes req's arguments (req.ArgsDecoder,
// req.Payload) and appends its results to res, which holds the reply header
// already; it may mark one DDP-eligible result (e.g. NFS READ data) with
// res.Payload. The returned error chooses the reply (RFC 5531 section 9):
//
//   - nil: SUCCESS with the results in res;
//   - wrapping ErrGarbageArgs or an xdr decoding error (xdr.ErrShort,
//     ErrTooLong, ErrBadBool, ErrBadDiscriminant): GARBAGE_ARGS;
//   - wrapping ErrProcUnavail (ErrProgUnavail): PROC_UNAVAIL (PROG_UNAVAIL);
//   - an *AuthError: MSG_DENIED AUTH_ERROR with its Stat;
//   - anything else (ErrSystemErr, an I/O error, ...): SYSTEM_ERR.
//
// On error, whatever the handler put in res is discarded. Handlers run
// concurrently; req and its slices are valid until the handler returns.
type Handler func(ctx context.Context, req *Request, res *Builder) error

// Server dispatches calls to registered procedures (RFC 5531). It
// implements Dispatcher for any server transport (ServeTCP, pkg/rpcrdma).
// Register and SetAuthFlavors may be called while serving.
type Server struct {
	log     *slog.Logger
	mu      sync.Mutex // serialises writers of reg
	reg     atomic.Pointer[registry]
	flavors atomic.Uint64 // bit f set: flavor f accepted (f < 64)
	obs     atomic.Pointer[Observer]
}

// CallStatus is how the Server answered a call, for an Observer: the
// accept_stat of an accepted call (Success .. SystemErr, same values as
// AcceptStat), the reject_stat of a denied one, or no reply.
type CallStatus uint8

// Call statuses. The first six equal the AcceptStat values.
const (
	StatusSuccess      CallStatus = CallStatus(Success)
	StatusProgUnavail  CallStatus = CallStatus(ProgUnavail)
	StatusProgMismatch CallStatus = CallStatus(ProgMismatch)
	StatusProcUnavail  CallStatus = CallStatus(ProcUnavail)
	StatusGarbageArgs  CallStatus = CallStatus(GarbageArgs)
	StatusSystemErr    CallStatus = CallStatus(SystemErr)
	StatusRPCMismatch  CallStatus = 6 // MSG_DENIED RPC_MISMATCH
	StatusAuthError    CallStatus = 7 // MSG_DENIED AUTH_ERROR
	StatusDropped      CallStatus = 8 // no reply: undecodable call, or the handler failed after ctx ended

	// NumCallStatus is the number of CallStatus values (0..NumCallStatus-1).
	NumCallStatus = 9
)

var callStatusNames = [NumCallStatus]string{
	"success", "prog_unavail", "prog_mismatch", "proc_unavail", "garbage_args",
	"system_err", "rpc_mismatch", "auth_error", "dropped",
}

// String returns the status as a metric label value: "success",
// "garbage_args", "auth_error", "dropped", ...
func (s CallStatus) String() string {
	if s < NumCallStatus {
		return callStatusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Observer is told of every call a Server dispatched (see SetObserver).
type Observer interface {
	// ObserveCall runs after the reply to req was encoded (or the call
	// dropped), on the dispatching goroutine: it must be quick and must not
	// keep req, whose fields are valid only during the call. req.Prog,
	// Vers and Proc are what could be decoded of the call header (zero
	// when the header was not decodable). d is the time Dispatch took:
	// header decoding, the handler and reply encoding, not the transport's
	// send.
	ObserveCall(req *Request, status CallStatus, d time.Duration)
}

// SetObserver makes o observe every later call (nil: none). Without an
// observer Dispatch costs one atomic load more; with one, two clock reads
// and o's ObserveCall. It may be called while serving.
func (s *Server) SetObserver(o Observer) {
	if o == nil {
		s.obs.Store(nil)
		return
	}
	s.obs.Store(&o)
}

type registry map[uint32]*program

type program struct {
	low, high uint32
	vers      map[uint32][]Handler
}

// NewServer returns a Server with no programs, accepting AUTH_NONE and
// AUTH_SYS credentials. A nil logger means slog.Default().
func NewServer(logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{log: logger}
	s.reg.Store(&registry{})
	s.flavors.Store(1<<AuthNone | 1<<AuthSys)
	return s
}

// Register makes version vers of program prog available with procs[i] as
// the handler of procedure i; nil entries answer PROC_UNAVAIL. Procedure 0
// (NULL) answers SUCCESS with no results unless procs[0] is set. Register
// replaces an earlier registration of the same (prog, vers).
func (s *Server) Register(prog, vers uint32, procs []Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.reg.Load()
	reg := make(registry, len(old)+1)
	maps.Copy(reg, old)
	p := &program{low: vers, high: vers, vers: map[uint32][]Handler{}}
	if o := old[prog]; o != nil {
		maps.Copy(p.vers, o.vers)
		p.low, p.high = min(o.low, vers), max(o.high, vers)
	}
	p.vers[vers] = append([]Handler(nil), procs...)
	reg[prog] = p
	s.reg.Store(&reg)
}

// SetAuthFlavors sets the credential flavors the server accepts; only
// AuthNone and AuthSys are understood. A call with another understood flavor
// is denied AUTH_TOOWEAK, except that NULL (procedure 0) is always answered
// with AUTH_NONE: by convention it never requires authentication (RFC 5531
// section 12.1). Unknown flavors are
// denied AUTH_BADCRED.
func (s *Server) SetAuthFlavors(flavors ...AuthFlavor) {
	var m uint64
	for _, f := range flavors {
		if f < 64 {
			m |= 1 << f
		}
	}
	s.flavors.Store(m)
}

func (s *Server) accepts(f AuthFlavor) bool { return f < 64 && s.flavors.Load()&(1<<f) != 0 }

// Dispatch implements Dispatcher. Checks, in order (RFC 5531 section 9):
// an undecodable call header is dropped; rpcvers != 2 gets MSG_DENIED
// RPC_MISMATCH(2, 2); a malformed or refused credential or verifier gets
// MSG_DENIED AUTH_ERROR (AUTH_BADCRED, AUTH_BADVERF, AUTH_TOOWEAK); an
// unknown program PROG_UNAVAIL; another version of a known program
// PROG_MISMATCH(low, high); an unknown procedure PROC_UNAVAIL; then the
// handler's result (see Handler). Replies carry an AUTH_NONE verifier,
// empty except in the answer to an AUTH_TLS probe (RFC 9289 section 4.1):
// where the transport offers RPC-with-TLS (ServeTCP with TCPOptions.TLS, on
// a connection's first call), a NULL call with an empty AUTH_TLS credential
// and an AUTH_NONE verifier is answered as a NULL call, with the verifier
// "STARTTLS"; every other AUTH_TLS call is denied AUTH_BADCRED. A
// handler that fails after ctx ended gets no reply (dropped): ctx ends when
// the server stops, and the client should retransmit elsewhere.
func (s *Server) Dispatch(ctx context.Context, req *Request, out *Builder) bool {
	o := s.obs.Load()
	if o == nil {
		ok, _ := s.dispatch(ctx, req, out)
		return ok
	}
	start := time.Now()
	ok, st := s.dispatch(ctx, req, out)
	(*o).ObserveCall(req, st, time.Since(start))
	return ok
}

// dispatch is Dispatch, also returning how the call was answered.
func (s *Server) dispatch(ctx context.Context, req *Request, out *Builder) (bool, CallStatus) {
	var d xdr.Decoder
	d.Reset(req.Raw)
	h, err := DecodeCallHeader(&d)
	req.XID, req.Prog, req.Vers, req.Proc = h.XID, h.Prog, h.Vers, h.Proc
	if err != nil {
		var me *MismatchError
		var ae *AuthError
		switch {
		case errors.As(err, &me):
			s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgDenied, Reject: RejectRPCMismatch, Low: me.Low, High: me.High})
			return true, StatusRPCMismatch
		case errors.As(err, &ae):
			s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgDenied, Reject: RejectAuthError, Auth: ae.Stat})
			return true, StatusAuthError
		default:
			s.log.Debug("sunrpc: dropping undecodable call", "peer", req.Peer, "transport", req.Transport, "err", err)
			return false, StatusDropped
		}
	}
	req.Args = d.Rest()
	if err := req.Cred.parse(h.Cred, h.Verf, s.accepts, h.Proc == 0, req.offerTLS); err != nil {
		var ae *AuthError
		stat := AuthBadCred
		if errors.As(err, &ae) {
			stat = ae.Stat
		}
		s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgDenied, Reject: RejectAuthError, Auth: stat})
		return true, StatusAuthError
	}
	// An accepted AUTH_TLS probe is answered with the STARTTLS verifier,
	// whatever the accept_stat (RFC 9289 section 4.1); the transport starts
	// the handshake once the reply is sent.
	var verf OpaqueAuth
	if req.Cred.Flavor == AuthTLS {
		verf.Body = startTLSVerifier[:]
		req.startTLS = true
	}
	p := (*s.reg.Load())[h.Prog]
	if p == nil {
		s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgAccepted, Verf: verf, Accept: ProgUnavail})
		return true, StatusProgUnavail
	}
	procs, ok := p.vers[h.Vers]
	if !ok {
		s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgAccepted, Verf: verf, Accept: ProgMismatch, Low: p.low, High: p.high})
		return true, StatusProgMismatch
	}
	var hd Handler
	if h.Proc < uint32(len(procs)) {
		hd = procs[h.Proc]
	}
	if hd == nil {
		if h.Proc == 0 {
			s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgAccepted, Verf: verf, Accept: Success})
			return true, StatusSuccess
		}
		s.reply(out, &ReplyHeader{XID: h.XID, Stat: MsgAccepted, Verf: verf, Accept: ProcUnavail})
		return true, StatusProcUnavail
	}
	rh := acceptedReply(h.XID, Success)
	rh.Verf = verf
	rh.Encode(&out.Encoder)
	if err := s.run(ctx, hd, req, out); err != nil {
		if ctx.Err() != nil {
			// The server is stopping (or the connection is gone): send
			// nothing, so that the client retransmits to a live server
			// rather than see a SYSTEM_ERR for a call that was cut short.
			return false, StatusDropped
		}
		rh := s.errorReply(h.XID, err)
		if rh.Stat == MsgAccepted {
			rh.Verf = verf
		}
		out.restart()
		rh.Encode(&out.Encoder)
		return true, replyStatus(&rh)
	}
	return true, StatusSuccess
}

// replyStatus is the CallStatus of reply header h.
func replyStatus(h *ReplyHeader) CallStatus {
	if h.Stat == MsgDenied {
		if h.Reject == RejectRPCMismatch {
			return StatusRPCMismatch
		}
		return StatusAuthError
	}
	return CallStatus(h.Accept)
}

func (s *Server) reply(out *Builder, h *ReplyHeader) {
	out.restart()
	h.Encode(&out.Encoder)
}

// run calls hd, turning a panic into an error.
func (s *Server) run(ctx context.Context, hd Handler, req *Request, out *Builder) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("sunrpc: handler panic", "prog", req.Prog, "vers", req.Vers, "proc", req.Proc, "panic", p)
			err = fmt.Errorf("%w: handler panic: %v", ErrSystemErr, p)
		}
	}()
	return hd(ctx, req, out)
}

func (s *Server) errorReply(xid uint32, err error) ReplyHeader {
	var ae *AuthError
	switch {
	case errors.As(err, &ae):
		return ReplyHeader{XID: xid, Stat: MsgDenied, Reject: RejectAuthError, Auth: ae.Stat}
	case errors.Is(err, ErrGarbageArgs), errors.Is(err, xdr.ErrShort), errors.Is(err, xdr.ErrTooLong),
		errors.Is(err, xdr.ErrBadBool), errors.Is(err, xdr.ErrBadDiscriminant):
		return acceptedReply(xid, GarbageArgs)
	case errors.Is(err, ErrProcUnavail):
		return acceptedReply(xid, ProcUnavail)
	case errors.Is(err, ErrProgUnavail):
		return acceptedReply(xid, ProgUnavail)
	}
	if !errors.Is(err, ErrSystemErr) {
		s.log.Warn("sunrpc: handler failed", "xid", xid, "err", err)
	}
	return acceptedReply(xid, SystemErr)
}
