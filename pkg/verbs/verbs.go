package verbs

import (
	"context"
	"fmt"
	"net"
)

// Access is the set of rights a memory region grants (libibverbs
// IBV_ACCESS_*). Local read access is always granted.
type Access uint32

const (
	// AccessLocalWrite lets the local device write the region: needed for
	// receive buffers and RDMA Read sinks.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite lets the peer RDMA Write into the region.
	AccessRemoteWrite
	// AccessRemoteRead lets the peer RDMA Read from the region.
	AccessRemoteRead
)

// SGE is one scatter/gather element: Length bytes at tagged offset Addr of
// the region whose lkey is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is the kind of a send-queue work request.
type WROpcode uint8

const (
	// WRSend sends the gathered bytes to the next receive the peer posted
	// (RDMAP Send, RFC 5040 section 5.3).
	WRSend WROpcode = iota
	// WRSendWithInv is a Send that also invalidates the peer's STag
	// InvalidateKey (RDMAP Send with Invalidate).
	WRSendWithInv
	// WRRDMAWrite writes the gathered bytes to the peer's region RKey at
	// tagged offset RemoteAddr (RFC 5040 section 5.1).
	WRRDMAWrite
	// WRRDMARead reads SGL[0].Length bytes from the peer's region RKey at
	// RemoteAddr into the local SGL[0] (RFC 5040 section 5.2). At most one
	// SGE.
	WRRDMARead
	// WRLocalInv invalidates the local STag InvalidateKey.
	WRLocalInv
)

func (o WROpcode) String() string {
	switch o {
	case WRSend:
		return "SEND"
	case WRSendWithInv:
		return "SEND_WITH_INV"
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMARead:
		return "RDMA_READ"
	case WRLocalInv:
		return "LOCAL_INV"
	}
	return "WR_OPCODE(?)"
}

// SendFlags modify a send-queue work request.
type SendFlags uint8

const (
	// SendSignaled asks for a work completion on success. Errors always
	// produce a completion.
	SendSignaled SendFlags = 1 << iota
	// SendSolicited sets the Solicited Event bit of a Send (RDMAP Send with SE).
	SendSolicited
	// SendFence holds the request until all earlier RDMA Reads completed.
	SendFence
)

// SendWR is a send-queue work request. Posting copies it; the caller may
// reuse it at once. The memory the SGL names must stay registered and
// unchanged until the request completes.
type SendWR struct {
	ID            uint64
	Opcode        WROpcode
	Flags         SendFlags
	SGL           []SGE
	RemoteAddr    uint64 // tagged offset at the peer (RDMA Write, RDMA Read)
	RKey          uint32 // the peer's STag (RDMA Write, RDMA Read)
	InvalidateKey uint32 // STag to invalidate (WRSendWithInv: the peer's; WRLocalInv: ours)
}

// RecvWR is a receive-queue work request: where the next incoming Send lands.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is the outcome of a work request (libibverbs enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess WCStatus = iota
	// WCLocLenErr: an incoming Send was longer than the posted receive, or an
	// SGE ran past its region.
	WCLocLenErr
	// WCLocProtErr: an SGE named an invalid lkey or lacked the access right.
	WCLocProtErr
	// WCLocQPOpErr: the request was malformed for this queue pair.
	WCLocQPOpErr
	// WCFlushErr: the queue pair went to the error state before the request ran.
	WCFlushErr
	// WCRemAccessErr: the peer refused an RDMA Write/Read or an invalidate:
	// bad STag, out of bounds, or no access right (a Terminate carries the detail).
	WCRemAccessErr
	// WCRemOpErr: the peer could not complete the operation (for example no
	// receive posted, or message too long).
	WCRemOpErr
	// WCFatalErr: the connection was lost while the request was in flight.
	WCFatalErr
)

func (s WCStatus) String() string {
	switch s {
	case WCSuccess:
		return "success"
	case WCLocLenErr:
		return "local length error"
	case WCLocProtErr:
		return "local protection error"
	case WCLocQPOpErr:
		return "local QP operation error"
	case WCFlushErr:
		return "work request flushed"
	case WCRemAccessErr:
		return "remote access error"
	case WCRemOpErr:
		return "remote operation error"
	case WCFatalErr:
		return "fatal error"
	}
	return "unknown status"
}

// WCOpcode is what a completion completes.
type WCOpcode uint8

const (
	WCSend WCOpcode = iota
	WCRDMAWrite
	WCRDMARead
	WCLocalInv
	WCRecv
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	}
	return "WC_OPCODE(?)"
}

// WCFlags describe a receive completion.
type WCFlags uint8

const (
	// WCWithInv: the Send invalidated our STag InvalidatedKey.
	WCWithInv WCFlags = 1 << iota
	// WCSolicitedEvent: the Send carried the Solicited Event bit.
	WCSolicitedEvent
)

// WC is a work completion.
type WC struct {
	ID             uint64
	Status         WCStatus
	Opcode         WCOpcode
	Flags          WCFlags
	ByteLen        uint32 // bytes received (WCRecv) or read (WCRDMARead)
	InvalidatedKey uint32 // with WCWithInv
	QPNum          uint32
	// Err carries the detail of a failed completion (wraps a sentinel of
	// this package, and for remote errors the Terminate's layer/type/code).
	Err error
}

// QPState is the state of a queue pair (a subset of the verbs QP states).
type QPState uint8

const (
	QPInit  QPState = iota // created; receives may be posted
	QPRTS                  // connected: ready to send and receive
	QPError                // failed or disconnected; work is flushed
)

func (s QPState) String() string {
	switch s {
	case QPInit:
		return "INIT"
	case QPRTS:
		return "RTS"
	case QPError:
		return "ERROR"
	}
	return "?"
}

// QPAttr sizes a queue pair. Zero fields take the provider's defaults.
type QPAttr struct {
	SendCQ, RecvCQ CQ
	MaxSendWR      int // send-queue depth
	MaxRecvWR      int // receive-queue depth
	MaxSGE         int // SGEs per work request
}

// ConnParam is what one side offers when connecting or accepting.
type ConnParam struct {
	// PrivateData is the consumer's private data (at most MaxPrivateData bytes).
	PrivateData []byte
	// ResponderResources is the IRD: RDMA Reads the peer may have
	// outstanding against us.
	ResponderResources int
	// InitiatorDepth is the ORD: RDMA Reads we may have outstanding.
	InitiatorDepth int
}

// ConnInfo is what the connection setup negotiated.
type ConnInfo struct {
	// PrivateData is the peer's private data.
	PrivateData []byte
	// IRD and ORD in force on this side after negotiation.
	IRD, ORD int
	// MPA is what an iWARP connection negotiated in its MPA exchange
	// (RFC 5044, RFC 6581); nil for a provider that does not report it.
	MPA *MPAInfo
	// Path names where a hardware provider's connection runs: transport,
	// device, port and queue pair number; "" for software iWARP.
	Path string
}

// MPAInfo is what an MPA exchange negotiated (RFC 5044 section 7, RFC 6581).
type MPAInfo struct {
	// Revision is the MPA revision in force, 1 or 2.
	Revision int
	// CRC is whether FPDUs carry CRC32c (on unless both ends asked for it
	// off, section 7.1).
	CRC bool
	// MarkersTx and MarkersRx are whether the FPDUs we send, and those we
	// receive, carry markers (section 4.3; each end asks for its own).
	MarkersTx, MarkersRx bool
	// ULPDU is the largest ULPDU this side sends, in octets, at setup (it
	// may follow the path's MSS after).
	ULPDU int
	// RTR is the ready-to-receive message of the peer-to-peer setup
	// (RFC 6581 section 3): RTRNone, RTRWrite or RTRRead.
	RTR RTRKind
}

// RTRKind is the peer-to-peer ready-to-receive message an MPA exchange
// chose (RFC 6581 section 3).
type RTRKind uint8

// The RTR messages.
const (
	RTRNone  RTRKind = iota // no peer-to-peer setup
	RTRWrite                // zero-length RDMA Write
	RTRRead                 // zero-length RDMA Read
)

func (k RTRKind) String() string {
	switch k {
	case RTRWrite:
		return "zero-length Write"
	case RTRRead:
		return "zero-length Read"
	}
	return "none"
}

// String summarises the connection for logs, e.g. "MPA rev 2, CRC true,
// markers tx false rx false, ULPDU 32762, IRD 16, ORD 16, RTR zero-length
// Write" for software iWARP.
func (c ConnInfo) String() string {
	var s string
	if m := c.MPA; m != nil {
		s = fmt.Sprintf("MPA rev %d, CRC %v, markers tx %v rx %v, ULPDU %d, ", m.Revision, m.CRC, m.MarkersTx, m.MarkersRx, m.ULPDU)
	}
	if c.Path != "" {
		s += c.Path + ", "
	}
	s += fmt.Sprintf("IRD %d, ORD %d", c.IRD, c.ORD)
	if m := c.MPA; m != nil {
		s += ", RTR " + m.RTR.String()
	}
	return s
}

// Device is an RDMA device: a provider instance with its own STag space.
type Device interface {
	// Name is the device name (for example "siw0" or "mlx5_0").
	Name() string
	// Transport names the wire: "iwarp" (software or hardware), "roce", "ib".
	Transport() string
	AllocPD() (PD, error)
	// CreateCQ makes a completion queue holding up to depth completions.
	CreateCQ(depth int) (CQ, error)
	// Listen accepts connections on a TCP address ("host:port").
	Listen(ctx context.Context, addr string) (Listener, error)
	// Connect connects qp, in QPInit, to a listener at addr. It returns once
	// the queue pair is RTS, or an error (ErrRejected with the peer's private
	// data, a timeout, a protocol error).
	Connect(ctx context.Context, addr string, qp QP, p ConnParam) (ConnInfo, error)
	Close() error
}

// PD is a protection domain: regions and queue pairs of one PD work only
// with each other.
type PD interface {
	// RegMR registers buf with the given access. buf must not be empty.
	RegMR(buf []byte, access Access) (MR, error)
	CreateQP(attr QPAttr) (QP, error)
	Close() error
}

// MR is a registered memory region.
type MR interface {
	LKey() uint32
	RKey() uint32
	// Addr is the tagged offset of Bytes()[0].
	Addr() uint64
	Len() int
	Bytes() []byte
	Access() Access
	// SGE names n bytes at offset off of the region.
	SGE(off, n int) SGE
	// Valid reports whether the STag is valid (not invalidated).
	Valid() bool
	// Rekey makes the region valid again under a new consumer key and
	// returns the new STag: an STag handed out before no longer works
	// (fast-register with a rotated key).
	Rekey() uint32
	// Close deregisters the region. The MR must not be used afterwards: a
	// provider may hand the same value out again from a later RegMR (under
	// a new STag), so that per-call registrations need not allocate.
	Close() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	Poll(wc []WC) int
	// Wait blocks until a completion can be polled, ctx ends (its error) or
	// the queue is closed (ErrClosed).
	Wait(ctx context.Context) error
	Close() error
}

// CQHandler is a CQ that can run a function of the consumer in the
// provider's own context when completions arrive, instead of waking a
// goroutine blocked in Wait: the completion handler of a kernel ULP's CQ
// (ib_alloc_cq with IB_POLL_SOFTIRQ). It saves the hand-off from the
// provider's goroutine to the consumer's on every completion, which is
// most of a small message's latency in software. The handler must not
// block: it polls the queue and hands the work on. Which completions run
// it, and on which goroutine, is the provider's (siw: receive completions,
// on the receive goroutine of the QP; the others still wake Wait), so a
// consumer that sets one still waits on the queue for the rest.
type CQHandler interface {
	// SetHandler sets h (nil removes it).
	SetHandler(h func())
}

// QP is a reliable-connected queue pair.
type QP interface {
	Num() uint32
	State() QPState
	// PostSend queues a send-queue work request. It fails at once
	// (ErrInvalidWR, ErrQueueFull, ErrQPState) without queueing anything.
	PostSend(wr *SendWR) error
	// PostRecv queues a receive buffer.
	PostRecv(wr *RecvWR) error
	// Done is closed when the queue pair enters the error state.
	Done() <-chan struct{}
	// Err says why the queue pair is in the error state (nil before).
	Err() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Close disconnects (if connected), flushes outstanding work and frees
	// the QP. It returns once the QP places no more incoming data in
	// registered memory (a placement under way has ended), also when
	// another goroutine began the failure.
	Close() error
}

// SendQueuer is a QP whose PostSend may transmit in the posting goroutine
// (siw writes a small Send to an idle send queue to its socket before
// PostSend returns). A consumer that posts under a lock of its own, because
// a value its messages carry orders them (the credit value of RPC-over-RDMA,
// RFC 8166 section 3.3), would hold that lock across the write: it queues
// under the lock and pushes after letting go of it, and the Sends others
// queued meanwhile go out in the same write. A NIC's PostSend rings a
// doorbell and returns; its QPs need not implement this.
type SendQueuer interface {
	// QueueSend queues wr after every work request posted before it, as
	// PostSend does (the same checks and errors), and transmits nothing.
	QueueSend(wr *SendWR) error
	// PushSends transmits what the send queue holds, in the caller's
	// goroutine, or leaves it to the goroutine transmitting now, which
	// takes it before it stops.
	PushSends()
}

// Listener accepts incoming connection requests.
type Listener interface {
	// Accept returns the next connection request; the caller must Accept or
	// Reject it.
	Accept(ctx context.Context) (ConnRequest, error)
	Addr() net.Addr
	Close() error
}

// ConnRequest is an incoming connection request.
type ConnRequest interface {
	// PrivateData is the requester's private data.
	PrivateData() []byte
	// Param is what the requester offered (its IRD and ORD).
	Param() ConnParam
	RemoteAddr() net.Addr
	// Accept connects qp, in QPInit, and returns once it is RTS.
	Accept(ctx context.Context, qp QP, p ConnParam) (ConnInfo, error)
	// Reject refuses the request, sending privateData to the requester.
	Reject(privateData []byte) error
}
