package rpcrdma

import (
	"fmt"
	"slices"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Transport properties of RPC-over-RDMA version 2
// (draft-ietf-nfsv4-rpcrdma-version-two section 5), exchanged in
// RDMA2_CONNPROP_MIDDLE and RDMA2_CONNPROP_FINAL just after a connection
// is established.

// PropID is rdma_which, a transport property's code point (section 5.1).
// Extensions define more; a receiver skips those it does not know.
type PropID uint32

// The base properties (sections 5.2 and 8.3).
const (
	PropSendSize   PropID = 1 // RDMA2_PROPID_SBSIZ: Maximum Send Size, uint32 bytes, default 4096
	PropRecvSize   PropID = 2 // RDMA2_PROPID_RBSIZ: Receive Buffer Size, uint32 bytes, default 4096
	PropMaxSegSize PropID = 3 // RDMA2_PROPID_RSSIZ: Maximum Segment Size, uint32 bytes, default 1048576
	PropMaxSegs    PropID = 4 // RDMA2_PROPID_RCSIZ: Maximum Segment Count, uint32, default 16
	PropReverse    PropID = 5 // RDMA2_PROPID_BRS: Reverse-Direction Support, uint32 RDMA2_RVRSDIR_*, default 0
	PropHostAuth   PropID = 6 // RDMA2_PROPID_HOSTAUTH: Host Auth Message, opaque<>
)

// Reverse-direction support levels, the values of PropReverse (section
// 5.2.5).
const (
	ReverseNone    = 0 // RDMA2_RVRSDIR_NONE
	ReverseSimple  = 1 // RDMA2_RVRSDIR_SIMPLE
	ReverseCont    = 2 // RDMA2_RVRSDIR_CONT
	ReverseGeneral = 3 // RDMA2_RVRSDIR_GENL
)

// Default values of the base properties (section 5.2), and the inline
// threshold of a version 2 connection whose peer sent no properties
// (section 4.2.2).
const (
	DefaultInline2     = 4096
	DefaultMaxSegSize2 = 1 << 20
	DefaultMaxSegs2    = 16
)

// Prop is one rpcrdma2_propval on the wire: the property's code point and
// its XDR-encoded value (empty: the property's default).
type Prop struct {
	Which PropID
	Data  []byte
}

// Properties are the base transport properties of one peer (section
// 5.2), in bytes where they are sizes.
type Properties struct {
	SendSize   uint32 // PropSendSize: the largest Send it posts
	RecvSize   uint32 // PropRecvSize: its receive buffers
	MaxSegSize uint32 // PropMaxSegSize: the largest segment it sends or receives
	MaxSegs    uint32 // PropMaxSegs: the most segments in a Requester's header
	Reverse    uint32 // PropReverse: RDMA2_RVRSDIR_*
	// HostAuth is the Host Auth Message (PropHostAuth), nil when absent.
	// It is carried, not interpreted: the draft leaves host
	// authentication unfinished (section 11.4).
	HostAuth []byte
}

// DefaultProperties are what a peer that sent no property is assumed to
// have (section 5.2).
func DefaultProperties() Properties {
	return Properties{SendSize: DefaultInline2, RecvSize: DefaultInline2, MaxSegSize: DefaultMaxSegSize2, MaxSegs: DefaultMaxSegs2, Reverse: ReverseNone}
}

// AppendProps appends p as a propset: every base property with its value
// (the Host Auth Message only when not nil), in code order. The values
// are written into buf, which the returned Props alias; it allocates only
// when dst has no room.
func (p Properties) AppendProps(dst []Prop, buf *[20]byte) []Prop {
	for i, v := range []uint32{p.SendSize, p.RecvSize, p.MaxSegSize, p.MaxSegs, p.Reverse} {
		b := buf[4*i : 4*i+4]
		be.PutUint32(b, v)
		dst = append(dst, Prop{Which: PropID(i + 1), Data: b})
	}
	if p.HostAuth != nil {
		dst = append(dst, Prop{Which: PropHostAuth, Data: p.HostAuth})
	}
	return dst
}

// ParseProperties applies props to the defaults (section 5.1): a known
// property with an empty value keeps its default; a known property whose
// value is not its XDR type (a uint32 is exactly 4 bytes; a reverse
// direction level is at most RDMA2_RVRSDIR_GENL; the Host Auth Message an
// opaque<> that fills its data exactly) is an error wrapping ErrPropVal,
// and nothing is applied (section 7.2.2); an unknown property is skipped
// (section 5.1). HostAuth aliases the property data.
func ParseProperties(props []Prop) (Properties, error) {
	p := DefaultProperties()
	for i, pv := range props {
		if len(pv.Data) == 0 {
			continue
		}
		var v *uint32
		switch pv.Which {
		case PropSendSize:
			v = &p.SendSize
		case PropRecvSize:
			v = &p.RecvSize
		case PropMaxSegSize:
			v = &p.MaxSegSize
		case PropMaxSegs:
			v = &p.MaxSegs
		case PropReverse:
			v = &p.Reverse
		case PropHostAuth:
			var d xdr.Decoder
			d.Reset(pv.Data)
			b := d.Opaque(len(pv.Data))
			if d.Err() != nil || d.Remaining() != 0 {
				return DefaultProperties(), &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("property %d (Host Auth Message): %d bytes are not one opaque<>", i, len(pv.Data))}
			}
			p.HostAuth = b
			continue
		default:
			continue
		}
		if len(pv.Data) != 4 {
			return DefaultProperties(), &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("property %d (rdma_which %d): %d bytes, its uint32 needs 4", i, pv.Which, len(pv.Data))}
		}
		*v = be.Uint32(pv.Data)
		if pv.Which == PropReverse && *v > ReverseGeneral {
			return DefaultProperties(), &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("property %d: reverse-direction support %d unknown", i, *v)}
		}
	}
	return p, nil
}

// appendProps appends an rpcrdma2_propset: its count, then each
// rpcrdma2_propval (rdma_which, rdma_data<> with XDR roundup).
func appendProps(dst []byte, props []Prop) []byte {
	dst = be.AppendUint32(dst, uint32(len(props)))
	for _, p := range props {
		dst = be.AppendUint32(dst, uint32(p.Which))
		dst = be.AppendUint32(dst, uint32(len(p.Data)))
		dst = append(dst, p.Data...)
		dst = append(dst, zero4[:xdr.Pad(len(p.Data))]...)
	}
	return dst
}

// decodeProps reads an rpcrdma2_propset into dst[:0]. The count is
// checked against MaxProps and each value's length against the bytes left
// before anything is appended; Data aliases the message. Errors wrap
// ErrChunk (RDMA2_ERR_BAD_XDR): the draft's example of a value longer than
// the message (section 5.1) is an XDR error of the propset, before any
// property is interpreted.
func decodeProps(d *xdr.Decoder, dst []Prop) ([]Prop, error) {
	off := PrefixLen + d.Offset()
	if d.Remaining() < 4 {
		return dst, headerErr(ErrShort, off, "missing rdma_props count")
	}
	count := d.Uint32()
	if count > MaxProps {
		return dst, headerErr(ErrChunk, off, "%d properties, at most %d accepted", count, MaxProps)
	}
	if uint64(count)*8 > uint64(d.Remaining()) {
		return dst, headerErr(ErrShort, off, "%d properties need at least %d bytes, %d left", count, count*8, d.Remaining())
	}
	dst = slices.Grow(dst[:0], int(count))
	for i := 0; i < int(count); i++ {
		off := PrefixLen + d.Offset()
		if d.Remaining() < 8 {
			return dst, headerErr(ErrShort, off, "property %d truncated", i)
		}
		which := PropID(d.Uint32())
		n := d.Uint32()
		if uint64(xdr.RoundUp(int(min(n, 1<<30)))) > uint64(d.Remaining()) || n > 1<<30 {
			return dst, headerErr(ErrShort, off+4, "property %d: rdma_data of %d bytes, %d left", i, n, d.Remaining())
		}
		if !allZero(d.Rest()[n:xdr.RoundUp(int(n))]) {
			return dst, headerErr(ErrChunk, off+8+int(n), "property %d: nonzero XDR roundup padding", i)
		}
		dst = append(dst, Prop{Which: which, Data: d.Fixed(int(n))})
	}
	return dst, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
