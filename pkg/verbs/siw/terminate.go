package siw

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Terminate layers (RFC 5040 section 4.8, table in section 7).
const (
	LayerRDMAP = 0
	LayerDDP   = 1
	LayerMPA   = 2 // LLP: MPA (RFC 5044 section 8)
)

// Terminate error types and codes (RFC 5040 section 4.8 / IANA "RDMAP
// Errors", "DDP Errors", "MPA Errors"; RFC 6581 adds MPA codes 5-7).
const (
	// RDMAP, EType
	rdmapLocalCatastrophic = 0
	rdmapRemoteProtection  = 1
	rdmapRemoteOperation   = 2
	// RDMAP codes
	rdmapInvalidSTag     = 0x00
	rdmapBaseBounds      = 0x01
	rdmapAccessRights    = 0x02
	rdmapSTagNotAssoc    = 0x03
	rdmapTOWrap          = 0x04
	rdmapInvalidVersion  = 0x05
	rdmapUnexpectedOp    = 0x06
	rdmapCatStream       = 0x07
	rdmapCatGlobal       = 0x08
	rdmapCannotInvalidte = 0x09
	rdmapUnspecified     = 0xff

	// DDP, EType
	ddpLocalCatastrophic = 0
	ddpTaggedBuffer      = 1
	ddpUntaggedBuffer    = 2
	// DDP tagged codes
	ddpTInvalidSTag  = 0x00
	ddpTBaseBounds   = 0x01
	ddpTSTagNotAssoc = 0x02
	ddpTTOWrap       = 0x03
	ddpTVersion      = 0x04
	// DDP untagged codes
	ddpUInvalidQN    = 0x01
	ddpUNoBuffer     = 0x02 // invalid MSN: no buffer available
	ddpUMSNRange     = 0x03 // invalid MSN: MSN range is not valid
	ddpUInvalidMO    = 0x04
	ddpUMsgTooLong   = 0x05
	ddpUInvalidVersn = 0x06

	// MPA (EType 0) codes
	mpaTCPLost       = 0x01
	mpaCRCError      = 0x02
	mpaMarkerError   = 0x03
	mpaInvalidReqRep = 0x04
	mpaLocalCatastr  = 0x05
	mpaInsuffIRD     = 0x06
	mpaNoMatchingRTR = 0x07
)

// TerminateError describes the error a Terminate message carried: one the
// peer sent us (Remote, matching verbs.ErrRemoteError) or one we sent the
// peer because its traffic violated the protocol (matching
// verbs.ErrLocalError). Compare with the exported sentinels using errors.Is.
type TerminateError struct {
	Layer, EType, Code uint8
	Remote             bool
	Detail             string
}

func (e *TerminateError) Error() string {
	dir := "sent Terminate"
	if e.Remote {
		dir = "peer sent Terminate"
	}
	s := fmt.Sprintf("siw: %s: %s (layer %d, type %d, code 0x%02x)", dir, terminateName(e.Layer, e.EType, e.Code), e.Layer, e.EType, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches verbs.ErrRemoteError/ErrLocalError by direction and the
// sentinel TerminateErrors below by layer/type/code.
func (e *TerminateError) Is(target error) bool {
	switch target {
	case verbs.ErrRemoteError:
		return e.Remote
	case verbs.ErrLocalError:
		return !e.Remote
	}
	if t, ok := target.(*TerminateError); ok {
		return t.Layer == e.Layer && t.EType == e.EType && t.Code == e.Code
	}
	return false
}

// Sentinels for errors.Is on a TerminateError (either direction).
var (
	ErrInvalidSTag    = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteProtection, Code: rdmapInvalidSTag}
	ErrBaseBounds     = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteProtection, Code: rdmapBaseBounds}
	ErrAccessRights   = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteProtection, Code: rdmapAccessRights}
	ErrSTagNotAssoc   = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteProtection, Code: rdmapSTagNotAssoc}
	ErrCannotInval    = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteOperation, Code: rdmapCannotInvalidte}
	ErrUnexpectedOp   = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteOperation, Code: rdmapUnexpectedOp}
	ErrRDMAPVersion   = &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteOperation, Code: rdmapInvalidVersion}
	ErrTaggedSTag     = &TerminateError{Layer: LayerDDP, EType: ddpTaggedBuffer, Code: ddpTInvalidSTag}
	ErrTaggedBounds   = &TerminateError{Layer: LayerDDP, EType: ddpTaggedBuffer, Code: ddpTBaseBounds}
	ErrDDPVersion     = &TerminateError{Layer: LayerDDP, EType: ddpTaggedBuffer, Code: ddpTVersion}
	ErrInvalidQN      = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUInvalidQN}
	ErrNoRecvBuffer   = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUNoBuffer}
	ErrMSNRange       = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUMSNRange}
	ErrInvalidMO      = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUInvalidMO}
	ErrMsgTooLong     = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUMsgTooLong}
	ErrUntaggedVersn  = &TerminateError{Layer: LayerDDP, EType: ddpUntaggedBuffer, Code: ddpUInvalidVersn}
	ErrCRC            = &TerminateError{Layer: LayerMPA, EType: 0, Code: mpaCRCError}
	ErrMarker         = &TerminateError{Layer: LayerMPA, EType: 0, Code: mpaMarkerError}
	ErrNoMatchingRTR  = &TerminateError{Layer: LayerMPA, EType: 0, Code: mpaNoMatchingRTR}
	ErrInsufficentIRD = &TerminateError{Layer: LayerMPA, EType: 0, Code: mpaInsuffIRD}
)

func terminateName(layer, etype, code uint8) string {
	switch layer {
	case LayerRDMAP:
		switch etype {
		case rdmapLocalCatastrophic:
			return "RDMAP local catastrophic error"
		case rdmapRemoteProtection, rdmapRemoteOperation:
			kind := "remote protection error"
			if etype == rdmapRemoteOperation {
				kind = "remote operation error"
			}
			switch code {
			case rdmapInvalidSTag:
				return "RDMAP " + kind + ": invalid STag"
			case rdmapBaseBounds:
				return "RDMAP " + kind + ": base or bounds violation"
			case rdmapAccessRights:
				return "RDMAP " + kind + ": access rights violation"
			case rdmapSTagNotAssoc:
				return "RDMAP " + kind + ": STag not associated with RDMAP stream"
			case rdmapTOWrap:
				return "RDMAP " + kind + ": tagged offset wrap"
			case rdmapInvalidVersion:
				return "RDMAP " + kind + ": invalid RDMAP version"
			case rdmapUnexpectedOp:
				return "RDMAP " + kind + ": unexpected opcode"
			case rdmapCatStream:
				return "RDMAP " + kind + ": catastrophic error localized to stream"
			case rdmapCatGlobal:
				return "RDMAP " + kind + ": catastrophic error, global"
			case rdmapCannotInvalidte:
				return "RDMAP " + kind + ": STag cannot be invalidated"
			}
			return "RDMAP " + kind
		}
	case LayerDDP:
		switch etype {
		case ddpLocalCatastrophic:
			return "DDP local catastrophic error"
		case ddpTaggedBuffer:
			switch code {
			case ddpTInvalidSTag:
				return "DDP tagged buffer error: invalid STag"
			case ddpTBaseBounds:
				return "DDP tagged buffer error: base or bounds violation"
			case ddpTSTagNotAssoc:
				return "DDP tagged buffer error: STag not associated with stream"
			case ddpTTOWrap:
				return "DDP tagged buffer error: tagged offset wrap"
			case ddpTVersion:
				return "DDP tagged buffer error: invalid DDP version"
			}
			return "DDP tagged buffer error"
		case ddpUntaggedBuffer:
			switch code {
			case ddpUInvalidQN:
				return "DDP untagged buffer error: invalid queue number"
			case ddpUNoBuffer:
				return "DDP untagged buffer error: no buffer posted (invalid MSN)"
			case ddpUMSNRange:
				return "DDP untagged buffer error: MSN out of range"
			case ddpUInvalidMO:
				return "DDP untagged buffer error: invalid message offset"
			case ddpUMsgTooLong:
				return "DDP untagged buffer error: message too long for the receive buffer"
			case ddpUInvalidVersn:
				return "DDP untagged buffer error: invalid DDP version"
			}
			return "DDP untagged buffer error"
		}
	case LayerMPA:
		switch code {
		case mpaTCPLost:
			return "MPA error: TCP connection lost"
		case mpaCRCError:
			return "MPA error: CRC error"
		case mpaMarkerError:
			return "MPA error: marker and header disagree"
		case mpaInvalidReqRep:
			return "MPA error: invalid MPA request/reply"
		case mpaLocalCatastr:
			return "MPA error: local catastrophic"
		case mpaInsuffIRD:
			return "MPA error: insufficient IRD"
		case mpaNoMatchingRTR:
			return "MPA error: no matching RTR"
		}
		return "MPA error"
	}
	return "unknown terminate error"
}

// validTriple reports whether (layer, etype, code) is defined by RFC 5040,
// 5041, 5044 or 6581.
func validTriple(layer, etype, code uint8) bool {
	switch layer {
	case LayerRDMAP:
		switch etype {
		case rdmapLocalCatastrophic:
			return code == 0
		case rdmapRemoteProtection:
			return code <= rdmapTOWrap || code == rdmapCannotInvalidte || code == rdmapUnspecified
		case rdmapRemoteOperation:
			return (code >= rdmapInvalidVersion && code <= rdmapCannotInvalidte) || code == rdmapUnspecified
		}
	case LayerDDP:
		switch etype {
		case ddpLocalCatastrophic:
			return code == 0
		case ddpTaggedBuffer:
			return code <= ddpTVersion
		case ddpUntaggedBuffer:
			return code >= ddpUInvalidQN && code <= ddpUInvalidVersn
		}
	case LayerMPA:
		return etype == 0 && code >= mpaTCPLost && code <= mpaNoMatchingRTR
	}
	return false
}

// termCtrl is a decoded Terminate Control word.
type termCtrl struct {
	layer, etype, code uint8
	m, d, r            bool
}

// putTermCtrl writes the Terminate Control word in the RFC 5040 section 4.8
// layout: layer in the top nibble of the first byte, then the type, the
// code, and the M/D/R flags in the top bits of the third byte.
func putTermCtrl(b []byte, t termCtrl) {
	b[0] = t.layer<<4 | t.etype&0xf
	b[1] = t.code
	var f byte
	if t.m {
		f |= 0x80
	}
	if t.d {
		f |= 0x40
	}
	if t.r {
		f |= 0x20
	}
	b[2] = f
	b[3] = 0
}

// parseTermCtrl decodes a Terminate Control word leniently: Linux siw lays
// it out as little-endian bitfields (layer in the low nibble of the first
// byte, flags in the low bits of the third), hardware per RFC 5040. The
// layout whose layer/type/code is defined and whose reserved flag bits are
// zero wins; a tie goes to RFC 5040.
func parseTermCtrl(b []byte) termCtrl {
	rfc := termCtrl{layer: b[0] >> 4, etype: b[0] & 0xf, code: b[1],
		m: b[2]&0x80 != 0, d: b[2]&0x40 != 0, r: b[2]&0x20 != 0}
	siwl := termCtrl{layer: b[0] & 0xf, etype: b[0] >> 4, code: b[1],
		m: b[2]&0x01 != 0, d: b[2]&0x02 != 0, r: b[2]&0x04 != 0}
	score := func(t termCtrl, reservedZero bool) int {
		s := 0
		if validTriple(t.layer, t.etype, t.code) {
			s += 2
		}
		if reservedZero {
			s++
		}
		return s
	}
	rs := score(rfc, b[2]&0x1f == 0)
	ss := score(siwl, b[2]&0xf8 == 0)
	if ss > rs {
		return siwl
	}
	return rfc
}
