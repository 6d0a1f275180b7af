package nlm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// netobj reads a netobj (opaque<MAXNETOBJ_SZ>) and copies it; an empty one
// is nil.
func netobj(d *xdr.Decoder) []byte {
	b := d.Opaque(MaxNetobjSize)
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// Lock is nlm4_lock (X/Open XNFS section 14.1): the lock a client asks
// for. CallerName (at most MaxStrLen bytes) names the client host; FH is
// the NFS file handle; OH (owner handle) with Svid (the process id on the
// client) names the lock owner; the range is Length bytes from Offset,
// Length 0 meaning "to the end of the file and beyond". Encoded as
// caller_name, fh, oh (each 4..1028 bytes), svid (4), l_offset (8),
// l_len (8).
type Lock struct {
	CallerName string // caller_name
	FH         []byte // fh
	OH         []byte // oh
	Svid       int32  // svid
	Offset     uint64 // l_offset
	Length     uint64 // l_len
}

// Encode writes l.
func (l *Lock) Encode(e *xdr.Encoder) {
	e.String(l.CallerName)
	e.Opaque(l.FH)
	e.Opaque(l.OH)
	e.Int32(l.Svid)
	e.Uint64(l.Offset)
	e.Uint64(l.Length)
}

// Decode reads l.
func (l *Lock) Decode(d *xdr.Decoder) error {
	l.CallerName = d.String(MaxStrLen)
	l.FH = netobj(d)
	l.OH = netobj(d)
	l.Svid = d.Int32()
	l.Offset = d.Uint64()
	l.Length = d.Uint64()
	return d.Err()
}

// Holder is nlm4_holder (X/Open XNFS section 14.1): the holder of a
// conflicting lock, returned by TEST. Encoded as exclusive (4), svid (4),
// oh (4..1028), l_offset (8), l_len (8).
type Holder struct {
	Exclusive bool   // exclusive
	Svid      int32  // svid
	OH        []byte // oh
	Offset    uint64 // l_offset
	Length    uint64 // l_len
}

// Encode writes h.
func (h *Holder) Encode(e *xdr.Encoder) {
	e.Bool(h.Exclusive)
	e.Int32(h.Svid)
	e.Opaque(h.OH)
	e.Uint64(h.Offset)
	e.Uint64(h.Length)
}

// Decode reads h.
func (h *Holder) Decode(d *xdr.Decoder) error {
	h.Exclusive = d.Bool()
	h.Svid = d.Int32()
	h.OH = netobj(d)
	h.Offset = d.Uint64()
	h.Length = d.Uint64()
	return d.Err()
}

// ShareMode is fsh4_mode (X/Open XNFS section 14.1): the access a SHARE
// denies to others. Decode keeps any value.
type ShareMode uint32

// fsh4_mode values.
const (
	DenyNone      ShareMode = 0 // fsm_DN
	DenyRead      ShareMode = 1 // fsm_DR
	DenyWrite     ShareMode = 2 // fsm_DW
	DenyReadWrite ShareMode = 3 // fsm_DRW
)

// ShareAccess is fsh4_access (X/Open XNFS section 14.1): the access a
// SHARE requests. Decode keeps any value.
type ShareAccess uint32

// fsh4_access values.
const (
	AccessNone      ShareAccess = 0 // fsa_NONE
	AccessRead      ShareAccess = 1 // fsa_R
	AccessWrite     ShareAccess = 2 // fsa_W
	AccessReadWrite ShareAccess = 3 // fsa_RW
)

// Share is nlm4_share (X/Open XNFS section 14.1): a DOS-style share
// reservation. Encoded as caller_name, fh, oh, mode (4), access (4).
type Share struct {
	CallerName string      // caller_name, at most MaxStrLen bytes
	FH         []byte      // fh
	OH         []byte      // oh
	Mode       ShareMode   // mode
	Access     ShareAccess // access
}

// Encode writes s.
func (s *Share) Encode(e *xdr.Encoder) {
	e.String(s.CallerName)
	e.Opaque(s.FH)
	e.Opaque(s.OH)
	e.Uint32(uint32(s.Mode))
	e.Uint32(uint32(s.Access))
}

// Decode reads s.
func (s *Share) Decode(d *xdr.Decoder) error {
	s.CallerName = d.String(MaxStrLen)
	s.FH = netobj(d)
	s.OH = netobj(d)
	s.Mode = ShareMode(d.Uint32())
	s.Access = ShareAccess(d.Uint32())
	return d.Err()
}
