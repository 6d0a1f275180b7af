package mount3

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// MntArgs is the argument of MNT (RFC 1813 section 5.2.1): a dirpath, the
// server path to mount, at most MaxPathLen (1024) bytes; 4..1028 bytes.
type MntArgs struct {
	Path string
}

// Encode writes a.
func (a *MntArgs) Encode(e *xdr.Encoder) { e.String(a.Path) }

// Decode reads a path of at most 1024 bytes.
func (a *MntArgs) Decode(d *xdr.Decoder) error {
	a.Path = d.String(MaxPathLen)
	return d.Err()
}

// UmntArgs is the argument of UMNT (RFC 1813 section 5.2.3): a dirpath of
// at most MaxPathLen (1024) bytes; 4..1028 bytes.
type UmntArgs struct {
	Path string
}

// Encode writes a.
func (a *UmntArgs) Encode(e *xdr.Encoder) { e.String(a.Path) }

// Decode reads a path of at most 1024 bytes.
func (a *UmntArgs) Decode(d *xdr.Decoder) error {
	a.Path = d.String(MaxPathLen)
	return d.Err()
}

// MntRes is mountres3 (RFC 1813 section 5.2.1): a union on a 4-byte
// mountstat3; with MNT3_OK, mountres3_ok follows: FH (fhandle3, 4..68
// bytes) and AuthFlavors (int auth_flavors<>: a 4-byte count and 4 bytes
// per flavor, e.g. 1 for AUTH_SYS, 6 for RPCSEC_GSS). Other statuses carry
// nothing. Decode allocates AuthFlavors with the count it read, refused if
// the input cannot hold that many.
type MntRes struct {
	Status      Status
	FH          nfs3.FH  // resok: fhandle
	AuthFlavors []uint32 // resok: auth_flavors
}

// Encode writes r.
func (r *MntRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	if r.Status != OK {
		return
	}
	r.FH.Encode(e)
	e.Uint32(uint32(len(r.AuthFlavors)))
	for _, f := range r.AuthFlavors {
		e.Uint32(f)
	}
}

// Decode reads r.
func (r *MntRes) Decode(d *xdr.Decoder) error {
	*r = MntRes{Status: Status(d.Uint32())}
	if r.Status != OK {
		return d.Err()
	}
	r.FH.Decode(d)
	n := d.Uint32()
	if d.Err() != nil {
		return d.Err()
	}
	if uint64(n) > uint64(d.Remaining()/4) {
		d.SetErr(fmt.Errorf("%w: %d auth flavors in %d bytes", xdr.ErrShort, n, d.Remaining()))
		return d.Err()
	}
	if n > 0 {
		r.AuthFlavors = make([]uint32, n)
		for i := range r.AuthFlavors {
			r.AuthFlavors[i] = d.Uint32()
		}
	}
	return d.Err()
}

// MountEntry is mountbody (RFC 1813 section 5.2.2) without its link: a
// client host name (at most MaxNameLen bytes) and the directory it mounted
// (at most MaxPathLen bytes).
type MountEntry struct {
	Hostname  string // ml_hostname
	Directory string // ml_directory
}

// DumpRes is the result of DUMP (RFC 1813 section 5.2.2): mountlist, a
// linked list in which each mountbody is preceded by a 4-byte
// value_follows boolean and the list ends with FALSE. Decode counts the
// entries first and allocates Mounts once (at most one per 12 input bytes).
type DumpRes struct {
	Mounts []MountEntry
}

// Encode writes r.
func (r *DumpRes) Encode(e *xdr.Encoder) {
	for i := range r.Mounts {
		e.Bool(true)
		e.String(r.Mounts[i].Hostname)
		e.String(r.Mounts[i].Directory)
	}
	e.Bool(false)
}

// Decode reads r.
func (r *DumpRes) Decode(d *xdr.Decoder) error {
	r.Mounts = nil
	sc := *d
	n := 0
	for sc.Bool() {
		sc.Opaque(MaxNameLen)
		sc.Opaque(MaxPathLen)
		n++
	}
	if sc.Err() != nil {
		d.SetErr(sc.Err())
		return d.Err()
	}
	if n > 0 {
		r.Mounts = make([]MountEntry, 0, n)
	}
	for d.Bool() {
		r.Mounts = append(r.Mounts, MountEntry{
			Hostname:  d.String(MaxNameLen),
			Directory: d.String(MaxPathLen),
		})
	}
	return d.Err()
}

// Export is exportnode (RFC 1813 section 5.2.5) without its link: an
// exported directory (at most MaxPathLen bytes) and the groups (client
// host or netgroup names, at most MaxNameLen bytes each) allowed to mount
// it; no groups means everyone.
type Export struct {
	Dir    string   // ex_dir
	Groups []string // ex_groups
}

// ExportRes is the result of EXPORT (RFC 1813 section 5.2.5): exports, a
// linked list of exportnode, each with a linked list of groupnode; every
// node is preceded by a 4-byte value_follows boolean and each list ends
// with FALSE. Decode counts each list before allocating it (at most one
// Export per 12 and one group per 8 input bytes).
type ExportRes struct {
	Exports []Export
}

// Encode writes r.
func (r *ExportRes) Encode(e *xdr.Encoder) {
	for i := range r.Exports {
		e.Bool(true)
		e.String(r.Exports[i].Dir)
		for _, g := range r.Exports[i].Groups {
			e.Bool(true)
			e.String(g)
		}
		e.Bool(false)
	}
	e.Bool(false)
}

// scanGroups validates a groups list and returns its length.
func scanGroups(d *xdr.Decoder) int {
	n := 0
	for d.Bool() {
		d.Opaque(MaxNameLen)
		n++
	}
	return n
}

// Decode reads r.
func (r *ExportRes) Decode(d *xdr.Decoder) error {
	r.Exports = nil
	sc := *d
	n := 0
	for sc.Bool() {
		sc.Opaque(MaxPathLen)
		scanGroups(&sc)
		n++
	}
	if sc.Err() != nil {
		d.SetErr(sc.Err())
		return d.Err()
	}
	if n > 0 {
		r.Exports = make([]Export, 0, n)
	}
	for d.Bool() {
		ex := Export{Dir: d.String(MaxPathLen)}
		gs := *d
		if ng := scanGroups(&gs); ng > 0 {
			ex.Groups = make([]string, 0, ng)
		}
		for d.Bool() {
			ex.Groups = append(ex.Groups, d.String(MaxNameLen))
		}
		r.Exports = append(r.Exports, ex)
	}
	return d.Err()
}
