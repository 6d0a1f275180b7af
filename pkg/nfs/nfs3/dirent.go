package nfs3

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Entry is entry3 (RFC 1813 section 3.3.16): fileid (8 bytes), name (a
// filename3 of at most MaxNameLen bytes on decode: 4-byte length, bytes,
// padding) and cookie (8 bytes). In a dirlist3 each entry is preceded by the
// 4-byte value_follows boolean of the linked list.
type Entry struct {
	FileID uint64
	Name   string
	Cookie uint64
}

// Size returns the bytes e adds to a READDIR reply: its value_follows word
// and the entry, 24 + RoundUp(len(Name)). A server checks
// res.ResOKSize()+e.Size() <= count before appending e.
func (e *Entry) Size() int { return 4 + 8 + 4 + xdr.RoundUp(len(e.Name)) + 8 }

func (e *Entry) encode(enc *xdr.Encoder) {
	enc.Bool(true)
	enc.Uint64(e.FileID)
	enc.String(e.Name)
	enc.Uint64(e.Cookie)
}

// EntryPlus is entryplus3 (RFC 1813 section 3.3.17): fileid (8 bytes),
// name (filename3, at most MaxNameLen bytes on decode), cookie (8 bytes),
// name_attributes (post_op_attr, 4 or 88 bytes) and name_handle
// (post_op_fh3, 4 or 8..72 bytes). In a dirlistplus3 each entry is preceded
// by a 4-byte value_follows boolean.
type EntryPlus struct {
	FileID uint64
	Name   string
	Cookie uint64
	Attr   PostOpAttr // name_attributes
	Handle PostOpFH   // name_handle
}

// Size returns the bytes e adds to a READDIRPLUS reply: its value_follows
// word and the entry (32..440 bytes). A server checks
// res.ResOKSize()+e.Size() <= maxcount before appending e.
func (e *EntryPlus) Size() int {
	n := 4 + 8 + 4 + xdr.RoundUp(len(e.Name)) + 8 + 4 + 4
	if e.Attr.Set {
		n += FattrSize
	}
	if e.Handle.Set {
		n += 4 + xdr.RoundUp(e.Handle.FH.Len())
	}
	return n
}

// DirSize returns the bytes of directory information in e as READDIRPLUS
// dircount counts them (RFC 1813 section 3.3.17: without the attributes and
// the handle): fileid, name and cookie, 20 + RoundUp(len(Name)). dircount is
// a hint; a server may also stop when the sum reaches it.
func (e *EntryPlus) DirSize() int { return 8 + 4 + xdr.RoundUp(len(e.Name)) + 8 }

func (e *EntryPlus) encode(enc *xdr.Encoder) {
	enc.Bool(true)
	enc.Uint64(e.FileID)
	enc.String(e.Name)
	enc.Uint64(e.Cookie)
	e.Attr.Encode(enc)
	e.Handle.Encode(enc)
}

// decode reads the entry after its value_follows word; without keepName
// the name is checked but not allocated (scan pass).
func (e *EntryPlus) decode(d *xdr.Decoder, keepName bool) {
	e.FileID = d.Uint64()
	if keepName {
		e.Name = d.String(MaxNameLen)
	} else {
		d.Opaque(MaxNameLen)
	}
	e.Cookie = d.Uint64()
	e.Attr.Decode(d)
	e.Handle.Decode(d)
}

// ReaddirRes is READDIR3res (RFC 1813 section 3.3.16). resok: DirAttr
// (dir_attributes), Verf (cookieverf, 8 bytes), then dirlist3: Entries as a
// value_follows chain ended by FALSE, and EOF; resfail: DirAttr.
//
// A server builds the reply so that ResOKSize stays within the client's
// count (RFC 1813: count bounds the whole READDIR3resok):
//
//	for _, ent := range names {
//		if res.ResOKSize()+ent.Size() > int(args.Count) { break }
//		res.Entries = append(res.Entries, ent)
//	}
//
// keeping a running total instead of calling ResOKSize in the loop.
//
// Decode counts the entries first and then allocates Entries once with
// exactly that many (reusing the capacity of r.Entries), so a reply
// cannot make it allocate more than one Entry per 24 input bytes; names are
// allocated as strings.
type ReaddirRes struct {
	Status  Status
	DirAttr PostOpAttr // dir_attributes
	Verf    CookieVerf // resok: cookieverf
	Entries []Entry    // resok: reply.entries
	EOF     bool       // resok: reply.eof
}

// ResOKSize returns the encoded size of the READDIR3resok structure with
// the current entries: 16 bytes plus the directory attributes (4 or 88)
// plus the sum of the entries' Size.
func (r *ReaddirRes) ResOKSize() int {
	n := dirResOKHeadSize(&r.DirAttr)
	for i := range r.Entries {
		n += r.Entries[i].Size()
	}
	return n
}

// Encode writes r.
func (r *ReaddirRes) Encode(e *xdr.Encoder) {
	if !encodeDirResHead(e, r.Status, &r.DirAttr, &r.Verf) {
		return
	}
	for i := range r.Entries {
		r.Entries[i].encode(e)
	}
	e.Bool(false)
	e.Bool(r.EOF)
}

// Decode reads r (see ReaddirRes).
func (r *ReaddirRes) Decode(d *xdr.Decoder) error {
	entries := r.Entries[:0]
	*r = ReaddirRes{}
	if !decodeDirResHead(d, &r.Status, &r.DirAttr, &r.Verf) {
		return d.Err()
	}
	// Scan pass on a copy of the decoder: validate and count.
	sc := *d
	n := 0
	for sc.Bool() {
		sc.Uint64()
		sc.Opaque(MaxNameLen)
		sc.Uint64()
		n++
	}
	sc.Bool()
	if sc.Err() != nil {
		d.SetErr(sc.Err())
		return d.Err()
	}
	if cap(entries) < n {
		entries = make([]Entry, 0, n)
	}
	for d.Bool() {
		var ent Entry
		ent.FileID = d.Uint64()
		ent.Name = d.String(MaxNameLen)
		ent.Cookie = d.Uint64()
		entries = append(entries, ent)
	}
	r.EOF = d.Bool()
	if n > 0 {
		r.Entries = entries
	}
	return d.Err()
}

// ReaddirplusRes is READDIRPLUS3res (RFC 1813 section 3.3.17). resok:
// DirAttr (dir_attributes), Verf (cookieverf, 8 bytes), then dirlistplus3:
// Entries as a value_follows chain ended by FALSE, and EOF; resfail:
// DirAttr.
//
// A server keeps ResOKSize within the client's maxcount, checking each
// entry's Size before appending it (see ReaddirRes), and may also keep
// the sum of the entries' DirSize within dircount.
//
// Decode counts the entries first and then allocates Entries once with
// exactly that many (reusing the capacity of r.Entries): at most one
// EntryPlus per 32 input bytes.
type ReaddirplusRes struct {
	Status  Status
	DirAttr PostOpAttr  // dir_attributes
	Verf    CookieVerf  // resok: cookieverf
	Entries []EntryPlus // resok: reply.entries
	EOF     bool        // resok: reply.eof
}

// ResOKSize returns the encoded size of the READDIRPLUS3resok structure
// with the current entries: 16 bytes plus the directory attributes (4 or
// 88) plus the sum of the entries' Size.
func (r *ReaddirplusRes) ResOKSize() int {
	n := dirResOKHeadSize(&r.DirAttr)
	for i := range r.Entries {
		n += r.Entries[i].Size()
	}
	return n
}

// Encode writes r.
func (r *ReaddirplusRes) Encode(e *xdr.Encoder) {
	if !encodeDirResHead(e, r.Status, &r.DirAttr, &r.Verf) {
		return
	}
	for i := range r.Entries {
		r.Entries[i].encode(e)
	}
	e.Bool(false)
	e.Bool(r.EOF)
}

// Decode reads r (see ReaddirplusRes).
func (r *ReaddirplusRes) Decode(d *xdr.Decoder) error {
	entries := r.Entries[:0]
	*r = ReaddirplusRes{}
	if !decodeDirResHead(d, &r.Status, &r.DirAttr, &r.Verf) {
		return d.Err()
	}
	sc := *d
	n := 0
	var tmp EntryPlus
	for sc.Bool() {
		tmp.decode(&sc, false)
		n++
	}
	sc.Bool()
	if sc.Err() != nil {
		d.SetErr(sc.Err())
		return d.Err()
	}
	if cap(entries) < n {
		entries = make([]EntryPlus, 0, n)
	}
	for d.Bool() {
		entries = append(entries, EntryPlus{})
		entries[len(entries)-1].decode(d, true)
	}
	r.EOF = d.Bool()
	if n > 0 {
		r.Entries = entries
	}
	return d.Err()
}

// dirResOKHeadSize returns the bytes of a READDIR3resok or
// READDIRPLUS3resok without its entries: dir_attributes (4 or 88),
// cookieverf (8), the FALSE value_follows that ends the list and eof (4
// each).
func dirResOKHeadSize(dirAttr *PostOpAttr) int {
	return postOpAttrSize(dirAttr) + CookieVerfSize + 4 + 4
}

// encodeDirResHead writes what READDIR3res and READDIRPLUS3res begin
// with: the status, dir_attributes and, for NFS3_OK, the cookieverf. It
// reports whether the entries follow (NFS3_OK).
func encodeDirResHead(e *xdr.Encoder, st Status, dirAttr *PostOpAttr, verf *CookieVerf) bool {
	e.Uint32(uint32(st))
	dirAttr.Encode(e)
	if st != OK {
		return false
	}
	e.Fixed(verf[:])
	return true
}

// decodeDirResHead reads what encodeDirResHead writes. It reports whether
// the entries follow: the status is NFS3_OK and d has no error.
func decodeDirResHead(d *xdr.Decoder, st *Status, dirAttr *PostOpAttr, verf *CookieVerf) bool {
	*st = Status(d.Uint32())
	dirAttr.Decode(d)
	if *st != OK {
		return false
	}
	copy(verf[:], d.Fixed(CookieVerfSize))
	return d.Err() == nil
}

func postOpAttrSize(p *PostOpAttr) int {
	if p.Set {
		return 4 + FattrSize
	}
	return 4
}
