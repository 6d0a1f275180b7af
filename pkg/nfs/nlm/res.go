package nlm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// TestRes is nlm4_testres (X/Open XNFS section 14.1), the result of TEST
// and the argument of TEST_RES: cookie, then nlm4_testrply, a union on
// the 4-byte stat whose Denied arm carries the conflicting nlm4_holder.
// Holder is set exactly when Stat is Denied after Decode; Encode writes a
// zero holder if it is nil then, and nothing for other values.
type TestRes struct {
	Cookie []byte  // cookie
	Stat   Stat    // test_stat.stat
	Holder *Holder // test_stat.holder, with Denied only
}

// Encode writes r.
func (r *TestRes) Encode(e *xdr.Encoder) {
	e.Opaque(r.Cookie)
	e.Uint32(uint32(r.Stat))
	if r.Stat != Denied {
		return
	}
	if r.Holder == nil {
		var h Holder
		h.Encode(e)
		return
	}
	r.Holder.Encode(e)
}

// Decode reads r.
func (r *TestRes) Decode(d *xdr.Decoder) error {
	r.Cookie = netobj(d)
	r.Stat = Stat(d.Uint32())
	r.Holder = nil
	if d.Err() != nil || r.Stat != Denied {
		return d.Err()
	}
	r.Holder = new(Holder)
	return r.Holder.Decode(d)
}

// Res is nlm4_res (X/Open XNFS section 14.1), the result of LOCK, CANCEL,
// UNLOCK, GRANTED and NM_LOCK and the argument of LOCK_RES, CANCEL_RES,
// UNLOCK_RES and GRANTED_RES: cookie, stat (4 bytes).
type Res struct {
	Cookie []byte // cookie
	Stat   Stat   // stat.stat
}

// Encode writes r.
func (r *Res) Encode(e *xdr.Encoder) {
	e.Opaque(r.Cookie)
	e.Uint32(uint32(r.Stat))
}

// Decode reads r.
func (r *Res) Decode(d *xdr.Decoder) error {
	r.Cookie = netobj(d)
	r.Stat = Stat(d.Uint32())
	return d.Err()
}

// ShareRes is nlm4_shareres (X/Open XNFS section 14.1), the result of
// SHARE and UNSHARE: cookie, stat (4), sequence (int, unused by Linux).
type ShareRes struct {
	Cookie   []byte // cookie
	Stat     Stat   // stat
	Sequence int32  // sequence
}

// Encode writes r.
func (r *ShareRes) Encode(e *xdr.Encoder) {
	e.Opaque(r.Cookie)
	e.Uint32(uint32(r.Stat))
	e.Int32(r.Sequence)
}

// Decode reads r.
func (r *ShareRes) Decode(d *xdr.Decoder) error {
	r.Cookie = netobj(d)
	r.Stat = Stat(d.Uint32())
	r.Sequence = d.Int32()
	return d.Err()
}
