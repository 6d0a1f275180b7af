package siw

import "encoding/binary"

// MPA framing constants (RFC 5044).
const (
	mpaHdrLen     = 2     // ULPDU_Length field
	mpaCRCLen     = 4     // CRC field
	mpaMarkerLen  = 4     // Marker (section 4.2)
	mpaMarkerIntv = 512   // Marker interval in the TCP octet stream (section 4.3)
	maxULPDU      = 64768 // largest ULPDU DDP may post (section 4.1... "MULPDU")
	minULPDU      = 128
	// maxPrivData is the MPA private data limit (section 7.1).
	maxPrivData = 512
)

// DDP control byte (RFC 5041 section 4.2/4.3).
const (
	ddpTagged  = 0x80
	ddpLast    = 0x40
	ddpVersion = 0x01 // DV = 1 in the low two bits
	ddpVerMask = 0x03
)

// RDMAP control byte (RFC 5040 section 4.2): RV in the top two bits, opcode low nibble.
const (
	rdmapVersion = 0x40 // RV = 1
	rdmapVerMask = 0xc0
	rdmapOpMask  = 0x0f
)

// RDMAP opcodes (RFC 5040 section 4.3).
const (
	opRDMAWrite    = 0x0
	opReadRequest  = 0x1
	opReadResponse = 0x2
	opSend         = 0x3
	opSendInv      = 0x4
	opSendSE       = 0x5
	opSendSEInv    = 0x6
	opTerminate    = 0x7
)

// Untagged queue numbers (RFC 5040 section 4.3 / 5041 section 4.3).
const (
	qnSend      = 0
	qnReadReq   = 1
	qnTerminate = 2
	numQN       = 3
)

// Header sizes, bytes, after the 2-byte MPA length.
const (
	taggedHdrLen   = 14 // ctrl(2) STag(4) TO(8)
	untaggedHdrLen = 18 // ctrl(2) rsvdULP(4) QN(4) MSN(4) MO(4)
	readReqLen     = 28 // sink STag(4) sink TO(8) size(4) src STag(4) src TO(8)
	termCtrlLen    = 4
)

// ddpHdr is a decoded DDP/RDMAP header (tagged or untagged).
type ddpHdr struct {
	ddpCtrl, rdmaCtrl byte
	// tagged
	stag uint32
	to   uint64
	// untagged
	inv uint32 // RsvdULP: the STag to invalidate for Send with Invalidate
	qn  uint32
	msn uint32
	mo  uint32
}

func (h *ddpHdr) tagged() bool { return h.ddpCtrl&ddpTagged != 0 }
func (h *ddpHdr) last() bool   { return h.ddpCtrl&ddpLast != 0 }
func (h *ddpHdr) opcode() byte { return h.rdmaCtrl & rdmapOpMask }
func (h *ddpHdr) hdrLen() int {
	if h.tagged() {
		return taggedHdrLen
	}
	return untaggedHdrLen
}

// putTagged writes the 2-byte MPA length and a tagged header into b (16 bytes).
func putTagged(b []byte, ulpduLen int, last bool, op byte, stag uint32, to uint64) {
	binary.BigEndian.PutUint16(b[0:], uint16(ulpduLen))
	c := byte(ddpTagged | ddpVersion)
	if last {
		c |= ddpLast
	}
	b[2] = c
	b[3] = rdmapVersion | op
	binary.BigEndian.PutUint32(b[4:], stag)
	binary.BigEndian.PutUint64(b[8:], to)
}

// putUntagged writes the 2-byte MPA length and an untagged header into b (20 bytes).
func putUntagged(b []byte, ulpduLen int, last bool, op byte, inv, qn, msn, mo uint32) {
	binary.BigEndian.PutUint16(b[0:], uint16(ulpduLen))
	c := byte(ddpVersion)
	if last {
		c |= ddpLast
	}
	b[2] = c
	b[3] = rdmapVersion | op
	binary.BigEndian.PutUint32(b[4:], inv)
	binary.BigEndian.PutUint32(b[8:], qn)
	binary.BigEndian.PutUint32(b[12:], msn)
	binary.BigEndian.PutUint32(b[16:], mo)
}

// parseHdr decodes the DDP/RDMAP header from b, which starts at the DDP
// control byte and holds at least hdrLen bytes (2 for the control bytes
// first; the caller reads the rest once it knows tagged/untagged).
func parseHdr(b []byte, h *ddpHdr) {
	h.ddpCtrl, h.rdmaCtrl = b[0], b[1]
	if h.tagged() {
		h.stag = binary.BigEndian.Uint32(b[2:])
		h.to = binary.BigEndian.Uint64(b[6:])
		return
	}
	h.inv = binary.BigEndian.Uint32(b[2:])
	h.qn = binary.BigEndian.Uint32(b[6:])
	h.msn = binary.BigEndian.Uint32(b[10:])
	h.mo = binary.BigEndian.Uint32(b[14:])
}

// readReq is the RDMA Read Request header (RFC 5040 section 4.4).
type readReq struct {
	sinkSTag uint32
	sinkTO   uint64
	size     uint32
	srcSTag  uint32
	srcTO    uint64
}

func (r *readReq) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], r.sinkSTag)
	binary.BigEndian.PutUint64(b[4:], r.sinkTO)
	binary.BigEndian.PutUint32(b[12:], r.size)
	binary.BigEndian.PutUint32(b[16:], r.srcSTag)
	binary.BigEndian.PutUint64(b[20:], r.srcTO)
}

func (r *readReq) parse(b []byte) {
	r.sinkSTag = binary.BigEndian.Uint32(b[0:])
	r.sinkTO = binary.BigEndian.Uint64(b[4:])
	r.size = binary.BigEndian.Uint32(b[12:])
	r.srcSTag = binary.BigEndian.Uint32(b[16:])
	r.srcTO = binary.BigEndian.Uint64(b[20:])
}

// padLen is the MPA pad after a ULPDU so that the FPDU (2-byte length,
// ULPDU, pad) is a multiple of 4 (RFC 5044 section 4.1).
func padLen(ulpduLen int) int { return (4 - (mpaHdrLen+ulpduLen)&3) & 3 }

// mulpdu returns the largest ULPDU for an effective MSS (RFC 5044 section 4.5).
func mulpdu(emss int, markers bool) int {
	var m int
	if markers {
		m = emss - (6 + 4*((emss+511)/512) + emss%4)
	} else {
		m = emss - (6 + emss%4)
	}
	if m > maxULPDU {
		m = maxULPDU
	}
	if m < minULPDU {
		m = minULPDU
	}
	return m
}
