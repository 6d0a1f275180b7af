package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The out-of-band setup rides in the connection's private data
// (verbs.ConnParam.PrivateData), big-endian:
//
//	request (client -> server), 20 bytes:
//	  magic u32 | version u8 | test u8 | flags u8 | 0 u8 | size u32 | iters u32 | depth u32
//	reply (server -> client, accept), 24 bytes:
//	  magic u32 | version u8 | 0 u8 | 0 u16 | rkey u32 | length u32 | addr u64
//	reject (server -> client): magic u32 | version u8 | status u8 | 0 u16 | reason (text)
const (
	wireMagic   = 0x4e525046 // "NRPF"
	wireVersion = 1
	requestLen  = 20
	replyLen    = 24

	flagVerify = 1 << 0

	statusOK        = 0
	statusBadParams = 1
	statusNoMemory  = 2
)

// ErrProtocol reports private data or a control message that is not what
// this protocol sends.
var ErrProtocol = errors.New("perftest: protocol error")

// request is what the client asks of the server.
type request struct {
	test   Test
	verify bool
	size   uint32 // bytes per message
	iters  uint32 // messages (round trips for send_lat)
	depth  uint32 // outstanding work requests
}

func (r *request) encode() []byte {
	b := make([]byte, requestLen)
	binary.BigEndian.PutUint32(b[0:], wireMagic)
	b[4] = wireVersion
	b[5] = r.test.code()
	if r.verify {
		b[6] |= flagVerify
	}
	binary.BigEndian.PutUint32(b[8:], r.size)
	binary.BigEndian.PutUint32(b[12:], r.iters)
	binary.BigEndian.PutUint32(b[16:], r.depth)
	return b
}

func decodeRequest(b []byte) (request, error) {
	var r request
	if len(b) < requestLen || binary.BigEndian.Uint32(b) != wireMagic {
		return r, fmt.Errorf("%w: %d bytes of private data are not a perftest request", ErrProtocol, len(b))
	}
	if b[4] != wireVersion {
		return r, fmt.Errorf("%w: request version %d, want %d", ErrProtocol, b[4], wireVersion)
	}
	t, ok := testFromCode(b[5])
	if !ok {
		return r, fmt.Errorf("%w: unknown test code %d", ErrProtocol, b[5])
	}
	r.test = t
	r.verify = b[6]&flagVerify != 0
	r.size = binary.BigEndian.Uint32(b[8:])
	r.iters = binary.BigEndian.Uint32(b[12:])
	r.depth = binary.BigEndian.Uint32(b[16:])
	return r, nil
}

// options turns a request into checked Options (the server's view).
func (r *request) options() (Options, error) {
	o := Options{Test: r.test, Size: ByteSize(r.size), Iters: int(r.iters), Depth: int(r.depth), Verify: r.verify}
	if r.size == 0 || r.iters == 0 || r.depth == 0 {
		return o, fmt.Errorf("perftest: size, iters and depth must not be 0")
	}
	return o.withDefaults()
}

// reply names the server's buffer.
type reply struct {
	rkey   uint32
	length uint32 // bytes
	addr   uint64 // tagged offset of the buffer's first byte
}

func (r *reply) encode() []byte {
	b := make([]byte, replyLen)
	binary.BigEndian.PutUint32(b[0:], wireMagic)
	b[4] = wireVersion
	binary.BigEndian.PutUint32(b[8:], r.rkey)
	binary.BigEndian.PutUint32(b[12:], r.length)
	binary.BigEndian.PutUint64(b[16:], r.addr)
	return b
}

func decodeReply(b []byte) (reply, error) {
	var r reply
	if len(b) < replyLen || binary.BigEndian.Uint32(b) != wireMagic || b[4] != wireVersion {
		return r, fmt.Errorf("%w: %d bytes of private data are not a perftest reply", ErrProtocol, len(b))
	}
	r.rkey = binary.BigEndian.Uint32(b[8:])
	r.length = binary.BigEndian.Uint32(b[12:])
	r.addr = binary.BigEndian.Uint64(b[16:])
	return r, nil
}

func encodeReject(status uint8, reason string) []byte {
	b := make([]byte, 8, verbs.MaxPrivateData)
	binary.BigEndian.PutUint32(b[0:], wireMagic)
	b[4] = wireVersion
	b[5] = status
	if len(reason) > verbs.MaxPrivateData-8 {
		reason = reason[:verbs.MaxPrivateData-8]
	}
	return append(b, reason...)
}

// rejectReason extracts the server's reason from a reject's private data.
func rejectReason(b []byte) string {
	if len(b) < 8 || binary.BigEndian.Uint32(b) != wireMagic {
		return ""
	}
	return string(b[8:])
}

// Control messages are Sends of ctrlLen bytes:
//
//	kind u32 | value u32 | arg u64
const ctrlLen = 16

type ctrlKind uint32

const (
	ctrlDone    ctrlKind = 1 // client -> server: the data phase is over
	ctrlCredit  ctrlKind = 2 // server -> client (send_bw): value more receives posted
	ctrlAck     ctrlKind = 3 // server -> client: the data phase ended here
	ctrlVerdict ctrlKind = 4 // server -> client: value verdict*, arg first bad byte offset
)

const (
	verdictOK       = 0
	verdictMismatch = 1
)

type ctrlMsg struct {
	kind  ctrlKind
	value uint32
	arg   uint64
}

func (m ctrlMsg) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], uint32(m.kind))
	binary.BigEndian.PutUint32(b[4:], m.value)
	binary.BigEndian.PutUint64(b[8:], m.arg)
}

func parseCtrl(b []byte) (ctrlMsg, error) {
	if len(b) != ctrlLen {
		return ctrlMsg{}, fmt.Errorf("%w: control message of %d bytes", ErrProtocol, len(b))
	}
	m := ctrlMsg{kind: ctrlKind(binary.BigEndian.Uint32(b)), value: binary.BigEndian.Uint32(b[4:]), arg: binary.BigEndian.Uint64(b[8:])}
	if m.kind < ctrlDone || m.kind > ctrlVerdict {
		return ctrlMsg{}, fmt.Errorf("%w: control message kind %d", ErrProtocol, m.kind)
	}
	return m, nil
}
