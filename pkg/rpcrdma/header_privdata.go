package rpcrdma

import "fmt"

// RDMA-CM private data for RPC-over-RDMA version 1 (RFC 8797). It rides in
// the connection request and accept (with MPA, after the 4-byte IRD/ORD
// block of RFC 6581). Layout, 8 bytes, big-endian:
//
//	0      4        5      6           7
//	+------+--------+------+-----------+-----------+
//	| magic| version| flags| send size | recv size |
//	+------+--------+------+-----------+-----------+
//
// magic 0xf6ab0e18; version 1; flags bit 0 (the least significant) is
// Remote Invalidation, the other 7 bits are reserved: zero when sent,
// ignored when received; each size is one octet holding size/1024 - 1, so
// 1 KiB (0) to 256 KiB (255).
const (
	PrivateDataMagic   = 0xf6ab0e18 // Format Identifier
	PrivateDataVersion = 1
	PrivateDataLen     = 8

	// DefaultInline is the inline threshold both peers assume when the
	// other sent no private data, or private data this version does not
	// recognise (RFC 8166 section 3.3.3, RFC 8797).
	DefaultInline = 1024
	// OurInline is the send and receive size we advertise by default, the
	// default of Linux xprtrdma and svcrdma (RPCRDMA_DEF_INLINE,
	// RPCRDMA_DEF_INLINE_THRESH).
	OurInline = 4096

	// MinInlineSize and MaxInlineSize are the sizes one octet can carry.
	MinInlineSize = 1024
	MaxInlineSize = 256 * 1024

	privFlagRemoteInvalidate = 1 << 0
)

// PrivateData is the content of RFC 8797 private data.
type PrivateData struct {
	// RemoteInvalidate: the sender accepts RDMA Send With Invalidate
	// directed at it (it may be told to invalidate the STags it exposed
	// for a request when the reply arrives). Linux xprtrdma sets it;
	// svcrdma does not.
	RemoteInvalidate bool
	// SendSize is the largest RDMA Send the sender will post, in bytes.
	SendSize int
	// RecvSize is the size of the sender's receive buffers, in bytes: the
	// largest RDMA Send it can accept.
	RecvSize int
}

// defaultPrivateData is what we advertise unless configured otherwise:
// OurInline (4096) both ways, Remote Invalidation not offered (the
// transport sets it when it handles Send With Invalidate).
func defaultPrivateData() PrivateData {
	return PrivateData{SendSize: OurInline, RecvSize: OurInline}
}

// absentPrivateData is what a peer that sent no (recognised) private data
// is assumed to offer: 1024 bytes both ways, no Remote Invalidation (RFC
// 8166 section 3.3.3).
func absentPrivateData() PrivateData {
	return PrivateData{SendSize: DefaultInline, RecvSize: DefaultInline}
}

func encodeSize(n int) (byte, error) {
	if n < MinInlineSize || n > MaxInlineSize {
		return 0, fmt.Errorf("%w: inline size %d outside %d..%d bytes (RFC 8797)", ErrInvalid, n, MinInlineSize, MaxInlineSize)
	}
	return byte(n/1024 - 1), nil
}

func decodeSize(b byte) int { return (int(b) + 1) * 1024 }

// Append appends p's 8-byte encoding to dst. A size that is not a multiple
// of 1024 is rounded down, so that we never advertise more than we have;
// a size outside MinInlineSize..MaxInlineSize is an error wrapping
// ErrInvalid.
func (p PrivateData) Append(dst []byte) ([]byte, error) {
	send, err := encodeSize(p.SendSize)
	if err != nil {
		return dst, err
	}
	recv, err := encodeSize(p.RecvSize)
	if err != nil {
		return dst, err
	}
	var flags byte
	if p.RemoteInvalidate {
		flags |= privFlagRemoteInvalidate
	}
	dst = be.AppendUint32(dst, PrivateDataMagic)
	return append(dst, PrivateDataVersion, flags, send, recv), nil
}

// parsePrivateData decodes the private data b a peer sent. When b is
// shorter than 8 bytes, or its Format Identifier is not 0xf6ab0e18, or its
// version is not 1, the peer is treated as having sent none (this is not
// an error, RFC 8797): ok is false and p is absentPrivateData(). Bytes
// after the first 8 are ignored (InfiniBand CM pads private data with
// zeros; later versions may extend it), as are the reserved flag bits.
func parsePrivateData(b []byte) (p PrivateData, ok bool) {
	if len(b) < PrivateDataLen || be.Uint32(b) != PrivateDataMagic || b[4] != PrivateDataVersion {
		return absentPrivateData(), false
	}
	return PrivateData{
		RemoteInvalidate: b[5]&privFlagRemoteInvalidate != 0,
		SendSize:         decodeSize(b[6]),
		RecvSize:         decodeSize(b[7]),
	}, true
}

// negotiateInline returns a connection's inline thresholds (RFC 8166
// section 3.3.2, RFC 8797): send, the largest message we may RDMA Send,
// is the smaller of our send size and the peer's receive size; recv, the
// largest message the peer may Send us, is the smaller of our receive size
// and the peer's send size. Pass absentPrivateData() (what
// parsePrivateData returns) for a peer that sent none.
func negotiateInline(local, peer PrivateData) (send, recv int) {
	return min(local.SendSize, peer.RecvSize), min(local.RecvSize, peer.SendSize)
}
