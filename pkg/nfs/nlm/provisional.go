// Package nlm: provisional stand-in for the NLM v4 codecs (X/Open XNFS
// chapter 10), with the names the codec package promises; replaced by it.
package nlm

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

const (
	Program = 100021
	Version = 4
)

const (
	ProcNull    = 0
	ProcTest    = 1
	ProcLock    = 2
	ProcCancel  = 3
	ProcUnlock  = 4
	ProcGranted = 5
	ProcFreeAll = 23
)

// MaxStrLen is LM_MAXSTRLEN; MaxNetobj bounds netobj (cookies, owners, handles).
const (
	MaxStrLen = 1024
	MaxNetobj = 1024
)

type Stat uint32

const (
	Granted Stat = iota
	Denied
	DeniedNoLocks
	Blocked
	DeniedGracePeriod
	Deadlck
	ROFS
	StaleFH
	FBig
	Failed
)

func (s Stat) Error() string { return fmt.Sprintf("nlm4 stat %d", uint32(s)) }

type Lock struct {
	CallerName     string
	FH             []byte
	OH             []byte
	Svid           int32
	Offset, Length uint64
}

func (l *Lock) Encode(e *xdr.Encoder) {
	e.String(l.CallerName)
	e.Opaque(l.FH)
	e.Opaque(l.OH)
	e.Int32(l.Svid)
	e.Uint64(l.Offset)
	e.Uint64(l.Length)
}

func (l *Lock) Decode(d *xdr.Decoder) error {
	l.CallerName = d.String(MaxStrLen)
	l.FH = d.Opaque(MaxNetobj)
	l.OH = d.Opaque(MaxNetobj)
	l.Svid = d.Int32()
	l.Offset = d.Uint64()
	l.Length = d.Uint64()
	return d.Err()
}

type Holder struct {
	Exclusive      bool
	Svid           int32
	OH             []byte
	Offset, Length uint64
}

type TestArgs struct {
	Cookie    []byte
	Exclusive bool
	Lock      Lock
}

func (a *TestArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
}

func (a *TestArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = d.Opaque(MaxNetobj)
	a.Exclusive = d.Bool()
	return a.Lock.Decode(d)
}

type LockArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      Lock
	Reclaim   bool
	State     int32
}

func (a *LockArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Block)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
	e.Bool(a.Reclaim)
	e.Int32(a.State)
}

type CancArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      Lock
}

func (a *CancArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Block)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
}

type UnlockArgs struct {
	Cookie []byte
	Lock   Lock
}

func (a *UnlockArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	a.Lock.Encode(e)
}

type TestRes struct {
	Cookie []byte
	Stat   Stat
	Holder *Holder
}

func (r *TestRes) Decode(d *xdr.Decoder) error {
	r.Cookie = d.Opaque(MaxNetobj)
	r.Stat = Stat(d.Uint32())
	r.Holder = nil
	if r.Stat == Denied {
		h := &Holder{}
		h.Exclusive = d.Bool()
		h.Svid = d.Int32()
		h.OH = d.Opaque(MaxNetobj)
		h.Offset = d.Uint64()
		h.Length = d.Uint64()
		r.Holder = h
	}
	return d.Err()
}

type Res struct {
	Cookie []byte
	Stat   Stat
}

func (r *Res) Encode(e *xdr.Encoder) {
	e.Opaque(r.Cookie)
	e.Uint32(uint32(r.Stat))
}

func (r *Res) Decode(d *xdr.Decoder) error {
	r.Cookie = d.Opaque(MaxNetobj)
	r.Stat = Stat(d.Uint32())
	return d.Err()
}
