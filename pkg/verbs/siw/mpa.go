package siw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// MPA request/reply frame (RFC 5044 section 7.1, RFC 6581 section 3).
const (
	mpaKeyReq = "MPA ID Req Frame"
	mpaKeyRep = "MPA ID Rep Frame"

	mpaFlagMarkers  = 0x80
	mpaFlagCRC      = 0x40
	mpaFlagReject   = 0x20
	mpaFlagEnhanced = 0x10 // RFC 6581: IRD/ORD block present (revision 2)

	mpaFrameHdrLen = 20 // key(16) flags(1) rev(1) pd_length(2)
	mpaIRDORDLen   = 4

	// RFC 6581 section 3 bits in the IRD and ORD words.
	irdP2P      = 0x8000 // peer-to-peer mode
	irdSendRTR  = 0x4000 // zero-length Send as RTR
	ordWriteRTR = 0x8000 // zero-length RDMA Write as RTR
	ordReadRTR  = 0x4000 // zero-length RDMA Read as RTR
	irdOrdMask  = 0x3fff
)

// Errors of the MPA connection setup. All match verbs.ErrProtocol.
var (
	ErrMPAKey      = fmt.Errorf("%w: MPA key mismatch (not an MPA frame)", verbs.ErrProtocol)
	ErrMPARevision = fmt.Errorf("%w: unsupported MPA revision", verbs.ErrProtocol)
	ErrMPAPrivData = fmt.Errorf("%w: MPA private data too long", verbs.ErrProtocol)
	ErrMPAFrame    = fmt.Errorf("%w: malformed MPA frame", verbs.ErrProtocol)
)

// mpaFrame is a decoded MPA request or reply.
type mpaFrame struct {
	reply    bool
	markers  bool // M: the sender requires markers in the stream it receives
	crc      bool // C: the sender wants CRC32c (in a reply: CRC is in use)
	reject   bool // R (reply only)
	enhanced bool // E: RFC 6581 IRD/ORD block present
	rev      uint8
	// RFC 6581 block (when enhanced)
	ird, ord                   uint16 // 14-bit values
	p2p                        bool
	rtrSend, rtrWrite, rtrRead bool
	priv                       []byte // consumer private data (after the IRD/ORD block)
}

// encode appends the wire form of f to b.
func (f *mpaFrame) encode(b []byte) ([]byte, error) {
	pdLen := len(f.priv)
	if f.enhanced {
		pdLen += mpaIRDORDLen
	}
	if pdLen > maxPrivData {
		return b, ErrMPAPrivData
	}
	if f.reply {
		b = append(b, mpaKeyRep...)
	} else {
		b = append(b, mpaKeyReq...)
	}
	var flags byte
	if f.markers {
		flags |= mpaFlagMarkers
	}
	if f.crc {
		flags |= mpaFlagCRC
	}
	if f.reject {
		flags |= mpaFlagReject
	}
	if f.enhanced {
		flags |= mpaFlagEnhanced
	}
	b = append(b, flags, f.rev)
	b = binary.BigEndian.AppendUint16(b, uint16(pdLen))
	if f.enhanced {
		ird, ord := f.ird&irdOrdMask, f.ord&irdOrdMask
		if f.p2p {
			ird |= irdP2P
		}
		if f.rtrSend {
			ird |= irdSendRTR
		}
		if f.rtrWrite {
			ord |= ordWriteRTR
		}
		if f.rtrRead {
			ord |= ordReadRTR
		}
		b = binary.BigEndian.AppendUint16(b, ird)
		b = binary.BigEndian.AppendUint16(b, ord)
	}
	return append(b, f.priv...), nil
}

// decodeMPAFrame parses one MPA request (reply=false) or reply from hdr (20
// bytes) and pd (pd_length bytes). It never retains hdr; f.priv aliases pd.
func decodeMPAFrame(hdr, pd []byte, reply bool, f *mpaFrame) error {
	if len(hdr) < mpaFrameHdrLen {
		return ErrMPAFrame
	}
	key := mpaKeyReq
	if reply {
		key = mpaKeyRep
	}
	if string(hdr[:16]) != key {
		return fmt.Errorf("%w: got %q", ErrMPAKey, hdr[:16])
	}
	flags := hdr[16]
	*f = mpaFrame{
		reply:    reply,
		markers:  flags&mpaFlagMarkers != 0,
		crc:      flags&mpaFlagCRC != 0,
		reject:   flags&mpaFlagReject != 0,
		enhanced: flags&mpaFlagEnhanced != 0,
		rev:      hdr[17],
	}
	if int(binary.BigEndian.Uint16(hdr[18:])) != len(pd) {
		return fmt.Errorf("%w: pd_length %d, have %d", ErrMPAFrame, binary.BigEndian.Uint16(hdr[18:]), len(pd))
	}
	if f.rev == 0 || f.rev > 2 {
		return fmt.Errorf("%w: %d", ErrMPARevision, f.rev)
	}
	if f.rev == 1 {
		f.enhanced = false // the E bit is reserved in revision 1
	}
	if f.enhanced {
		if len(pd) < mpaIRDORDLen {
			return fmt.Errorf("%w: enhanced setup without the IRD/ORD block", ErrMPAFrame)
		}
		ird := binary.BigEndian.Uint16(pd[0:])
		ord := binary.BigEndian.Uint16(pd[2:])
		f.ird, f.ord = ird&irdOrdMask, ord&irdOrdMask
		f.p2p = ird&irdP2P != 0
		f.rtrSend = ird&irdSendRTR != 0
		f.rtrWrite = ord&ordWriteRTR != 0
		f.rtrRead = ord&ordReadRTR != 0
		pd = pd[mpaIRDORDLen:]
	}
	if len(pd) > 0 {
		f.priv = pd
	}
	return nil
}

// readMPAFrame reads one MPA request or reply from r. A private data length
// over 512 bytes is refused before reading it (RFC 5044 section 7.1).
func readMPAFrame(r io.Reader, reply bool, f *mpaFrame) error {
	var hdr [mpaFrameHdrLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: connection closed during MPA setup", verbs.ErrDisconnect)
		}
		return err
	}
	n := int(binary.BigEndian.Uint16(hdr[18:]))
	if n > maxPrivData {
		return fmt.Errorf("%w: %d bytes", ErrMPAPrivData, n)
	}
	pd := make([]byte, n)
	if _, err := io.ReadFull(r, pd); err != nil {
		return fmt.Errorf("%w: reading MPA private data: %v", verbs.ErrDisconnect, err)
	}
	return decodeMPAFrame(hdr[:], pd, reply, f)
}
