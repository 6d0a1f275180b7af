package rpcrdma

import "github.com/nfsrdma/nfsrdma-csi/pkg/verbs"

// recvLayout is where the receive buffers of a connection lie in its
// registered receive region: receive i is size bytes at i*stride+off.
type recvLayout struct{ stride, off, size int }

// newRecvLayout is the layout of the receives of a connection whose
// inline threshold is inline bytes (each receive holds inline bytes).
// Structured for send-based DDP (sddp, the structure ourRBStruct
// announced), a receive's header segment ends on a page boundary, where
// its DDP pages begin, and a receive takes one page more of the region;
// otherwise the receives are packed.
func newRecvLayout(inline int, sddp bool) recvLayout {
	if _, ok := ourRBStruct(inline); ok && sddp {
		return recvLayout{stride: inline + PageSize, off: PageSize - rbHeaderLen, size: inline}
	}
	return recvLayout{stride: inline, size: inline}
}

// region returns the zeroed, page-aligned memory of n receives, to
// register.
func (l recvLayout) region(n int) []byte { return pageAligned(n * l.stride) }

// sge is receive i of mr, the region registered.
func (l recvLayout) sge(mr verbs.MR, i int) verbs.SGE { return mr.SGE(i*l.stride+l.off, l.size) }

// buf is receive i of mr, the region registered.
func (l recvLayout) buf(mr verbs.MR, i int) []byte {
	return mr.Bytes()[i*l.stride+l.off:][:l.size:l.size]
}
