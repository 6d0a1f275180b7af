package sunrpc

import (
	"context"
	"fmt"
	"net"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Call is one outgoing call as a client transport sees it.
type Call struct {
	XID uint32
	// Msg is the whole call: RPC header (RFC 5531 section 9) and arguments,
	// with at most one DDP-eligible argument as Msg.Payload.
	Msg Message
	// ReplyPayload is where a DDP-eligible result (e.g. NFS READ data) may
	// be placed (an RFC 8166 Write chunk); nil if none.
	ReplyPayload []byte
	// LocateReplyPayload, when not nil (with ReplyPayload), lets a stream
	// transport (TCP) read the DDP-eligible result from the socket straight
	// into ReplyPayload, as Linux's xprtsock reads NFS READ data into the
	// page cache, instead of copying it out of the reply afterwards. It is
	// given the first bytes of the reply's results (those after accept_stat,
	// RFC 5531 section 9; all of them, or at least 500 bytes) and returns
	// the offset there of the result's XDR length word, or -1 when the reply
	// carries no such result (an error status) or the bytes given end before
	// it. The result must be the reply's last item, as NFS READ data and the
	// READLINK path are (RFC 8267 section 4). RDMA transports do not use it:
	// the responder's Write chunk says where the result went.
	LocateReplyPayload func(results []byte) int
	// MaxReplySize is an upper bound, in bytes, of the reply without the
	// DDP-eligible result; RFC 8267 section 4 uses it to decide on a Reply
	// chunk. 0 means unknown: the transport assumes its largest reply.
	MaxReplySize int
	// UnboundedReply tells that the reply's size cannot be bounded well
	// in advance (MaxReplySize is a bound it seldom nears, as for NFS
	// READDIRPLUS and READLINK): a transport that can receive a reply of
	// any size without preparing room for it (RPC-over-RDMA version 2
	// with responder-provided Read chunks) prepares none; the others use
	// MaxReplySize as usual.
	UnboundedReply bool
	// KeepPlaced lets a transport that received the DDP-eligible result
	// into its own buffers (RPC-over-RDMA send-based DDP) hand them on as
	// Reply.PlacedVec instead of copying them into ReplyPayload, which
	// then only bounds the result's size.
	KeepPlaced bool
}

// Releaser takes back the buffer of a Reply (see Reply.Release).
type Releaser interface {
	ReleaseReply(r *Reply)
}

// Reply is a received reply.
type Reply struct {
	// Body is the reply message (RFC 5531 section 9) without a DDP-placed
	// item. When an item was placed (into an RDMA Write chunk, or read
	// straight from a TCP stream, see Call.LocateReplyPayload), its XDR
	// length word stays in Body and its bytes and pad are absent (RFC 8166
	// section 3.4, "reduced" data items).
	Body []byte
	// Placed is the number of bytes of the DDP-eligible result placed into
	// Call.ReplyPayload, or -1: the result (if any) is inline in Body.
	Placed int
	// PlacedVec, when not nil (only with Call.KeepPlaced), holds the
	// Placed bytes instead of Call.ReplyPayload: the pieces of the
	// transport's receive buffers where they landed, in order, valid
	// until Release.
	PlacedVec [][]byte
	// Owner, when not nil, gets Body's buffer back on Release.
	Owner Releaser
}

// Release gives Body's buffer back to the transport. Neither r nor Body may
// be used afterwards. Calling it again is a no-op only until the transport
// reuses r: release exactly once.
func (r *Reply) Release() {
	if o := r.Owner; o != nil {
		r.Owner = nil
		o.ReleaseReply(r)
	}
}

// ClientTransport carries calls to one server over one connection. It is
// safe for concurrent use; many calls may be outstanding at once.
type ClientTransport interface {
	// RoundTrip sends c and waits for the reply with the same XID. It
	// returns ErrConnLost (wrapped) when the connection died before the
	// reply: the call may be retried with the same XID on a new transport.
	// It returns ctx's error (wrapped) when ctx ends first; the connection
	// stays usable. The caller releases the Reply. The transport does not
	// keep c or its buffers after RoundTrip returns.
	RoundTrip(ctx context.Context, c *Call) (*Reply, error)
	// Done is closed when the connection is dead.
	Done() <-chan struct{}
	// Close ends the connection; outstanding RoundTrips return ErrConnLost.
	Close() error
}

// DialFunc opens a new ClientTransport to the server; ctx bounds the dial.
type DialFunc func(ctx context.Context) (ClientTransport, error)

// Request is one received call as a server handler sees it.
//
// A server transport fills the transport part (Reset) and hands the Request
// to a Dispatcher, which parses the RPC header into the other fields. The
// slices alias the transport's receive buffers: they are valid until the
// Dispatcher returns.
type Request struct {
	// Parsed by the Dispatcher (RFC 5531 section 9).
	XID, Prog, Vers, Proc uint32
	Cred                  Credential
	// Args is the inline arguments, after the call header. When ArgPayload
	// is not nil, the DDP-eligible argument's length word is in Args and its
	// bytes are ArgPayload (see Payload).
	Args []byte

	// Filled by the transport.
	Raw        []byte // the whole call message (header and inline arguments)
	ArgPayload []byte // a DDP-eligible argument the transport already pulled (RFC 8166 Read chunk), or nil when inline
	// ArgPayloadVec, when not nil, is a DDP-eligible argument the
	// transport placed in pieces (send-based DDP across several receive
	// buffers): its bytes are the pieces in order, valid until the reply
	// is sent; ArgPayload is then nil. PayloadVec hands the pieces on,
	// Payload a copy of them joined.
	ArgPayloadVec [][]byte
	Peer          net.Addr // the caller's address
	Transport     string   // "tcp", "rdma", ...
	// TLS is the RPC-with-TLS session the call came on (RFC 9289), with
	// the client's verified certificate if it gave one; nil for a call
	// that came in plaintext. The calls of one connection share it: it is
	// read-only.
	TLS *TLSInfo

	// offerTLS is set by the TCP transport on a connection's first call
	// when it would start TLS after the reply (RFC 9289 section 4.1);
	// startTLS is set by the Server when it answered an AUTH_TLS probe
	// with the STARTTLS verifier.
	offerTLS, startTLS bool

	dec xdr.Decoder
	one [1][]byte // PayloadVec's vector of one piece
}

// Reset prepares r for a new call received by a transport, keeping r's
// internal storage (so a pooled Request decodes AUTH_SYS without allocating).
func (r *Request) Reset(raw, argPayload []byte, peer net.Addr, transport string) {
	r.XID, r.Prog, r.Vers, r.Proc = 0, 0, 0, 0
	r.Cred.Flavor, r.Cred.Body = AuthNone, nil
	r.Args = nil
	r.Raw, r.ArgPayload, r.Peer, r.Transport = raw, argPayload, peer, transport
	r.ArgPayloadVec = nil
	r.TLS, r.offerTLS, r.startTLS = nil, false, false
}

// Placed tells whether the transport took the DDP-eligible argument out
// of Args (ArgPayload or ArgPayloadVec).
func (r *Request) Placed() bool { return r.ArgPayload != nil || r.ArgPayloadVec != nil }

// ArgPayloadLen is the bytes of the placed DDP-eligible argument (0 when
// none was placed).
func (r *Request) ArgPayloadLen() int {
	if r.ArgPayloadVec == nil {
		return len(r.ArgPayload)
	}
	n := 0
	for _, p := range r.ArgPayloadVec {
		n += len(p)
	}
	return n
}

// PayloadVec is Payload without joining pieces: the argument as the
// transport placed it, one piece or several (ArgPayloadVec), or inline.
// The vector is owned by r (reused by the next call); nil, with the
// error recorded in d, as Payload.
func (r *Request) PayloadVec(d *xdr.Decoder, max int) [][]byte {
	if r.ArgPayloadVec == nil {
		p := r.Payload(d, max)
		if d.Err() != nil {
			return nil
		}
		r.one[0] = p
		return r.one[:]
	}
	if !r.checkPlacedLen(d, max, r.ArgPayloadLen()) {
		return nil
	}
	return r.ArgPayloadVec
}

// checkPlacedLen reads the placed argument's length word from d and
// checks it against max and the n bytes placed.
func (r *Request) checkPlacedLen(d *xdr.Decoder, max, n int) bool {
	w := d.Uint32()
	if d.Err() != nil {
		return false
	}
	if uint64(w) > uint64(max) {
		d.SetErr(fmt.Errorf("%w: %d > %d", xdr.ErrTooLong, w, max))
		return false
	}
	if int(w) != n {
		d.SetErr(fmt.Errorf("%w: DDP argument length word %d, %d bytes placed", ErrMalformed, w, n))
		return false
	}
	return true
}

// ArgsDecoder returns a decoder over Args, from its start. It is owned by r.
func (r *Request) ArgsDecoder() *xdr.Decoder {
	r.dec.Reset(r.Args)
	return &r.dec
}

// Payload reads the DDP-eligible variable-length opaque argument (e.g. NFS
// WRITE data) of at most max bytes at d's position: when the transport
// pulled it (ArgPayload != nil) it reads the length word from d and returns
// ArgPayload, checking the lengths agree (placed in pieces, ArgPayloadVec:
// a copy of them joined); otherwise it reads the item inline.
// Errors are recorded in d (xdr.ErrTooLong, ErrMalformed).
func (r *Request) Payload(d *xdr.Decoder, max int) []byte {
	if r.ArgPayloadVec != nil {
		if !r.checkPlacedLen(d, max, r.ArgPayloadLen()) {
			return nil
		}
		b := make([]byte, 0, r.ArgPayloadLen())
		for _, p := range r.ArgPayloadVec {
			b = append(b, p...)
		}
		return b
	}
	if r.ArgPayload == nil {
		return d.Opaque(max)
	}
	if !r.checkPlacedLen(d, max, len(r.ArgPayload)) {
		return nil
	}
	return r.ArgPayload
}

// Dispatcher handles the calls a server transport receives. Server is the
// implementation; transports accept any.
type Dispatcher interface {
	// Dispatch handles one call: req as filled by Request.Reset. It encodes
	// the whole reply message (RFC 5531 section 9) into reply, which the
	// transport provides empty, and returns true; or returns false to drop
	// the call without a reply (a call header that cannot be decoded gets
	// no reply, RFC 5531 section 9). Dispatch may be called concurrently.
	// The transport sends reply.Message() in one piece, then calls
	// reply.RunAfterSend (also when dropping).
	Dispatch(ctx context.Context, req *Request, reply *Builder) bool
}
