// Package mount3 is the XDR codec of the MOUNT protocol version 3 (RFC 1813
// section 5, program 100005 version 3), both directions. RFC 8267 section
// 5.1 has MOUNT carried over TCP even when NFS runs over RDMA, so nothing
// here is DDP-eligible.
//
// Naming follows package nfs3: the arguments and results of procedure FOO
// are FooArgs and FooRes, each with
//
//	Encode(e *xdr.Encoder)
//	Decode(d *xdr.Decoder) error
//
// NULL and UMNTALL take and return nothing; DUMP and EXPORT take nothing;
// UMNT returns nothing. The file handle of MNT is an nfs3.FH (fhandle3 and
// nfs_fh3 are the same 64-byte opaque).
//
// Status (mountstat3) implements error, with the non-OK values named
// ErrPerm, ErrNoEnt, ...; Errno maps it to a syscall.Errno and Is makes it
// match that Errno and the io/fs errors, as in package nfs3.
package mount3

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// Message is implemented by every argument and result type of the package.
type Message interface {
	Encode(e *xdr.Encoder)
	Decode(d *xdr.Decoder) error
}
