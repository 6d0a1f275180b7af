// Package nsm: provisional stand-in for the NSM v1 codecs, with the names
// the codec package promises; replaced by it.
package nsm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

const (
	Program    = 100024
	Version    = 1
	ProcNull   = 0
	ProcNotify = 6
	MaxStrLen  = 1024
)

type StatChge struct {
	MonName string
	State   int32
}

func (a *StatChge) Encode(e *xdr.Encoder) {
	e.String(a.MonName)
	e.Int32(a.State)
}

func (a *StatChge) Decode(d *xdr.Decoder) error {
	a.MonName = d.String(MaxStrLen)
	a.State = d.Int32()
	return d.Err()
}
