package nlm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// TestArgs is nlm4_testargs (X/Open XNFS section 14.1), the argument of
// TEST, TEST_MSG, GRANTED and GRANTED_MSG: cookie (netobj), exclusive
// (bool), alock (nlm4_lock).
type TestArgs struct {
	Cookie    []byte // cookie: echoed in the result
	Exclusive bool   // exclusive: a write lock rather than a read lock
	Lock      Lock   // alock
}

// Encode writes a.
func (a *TestArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
}

// Decode reads a.
func (a *TestArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = netobj(d)
	a.Exclusive = d.Bool()
	return a.Lock.Decode(d)
}

// LockArgs is nlm4_lockargs (X/Open XNFS section 14.1), the argument of
// LOCK, LOCK_MSG and NM_LOCK: cookie, block (bool: wait for the lock),
// exclusive (bool), alock, reclaim (bool: re-establishing a lock held
// before the server restarted), state (int: the client's NSM state
// number).
type LockArgs struct {
	Cookie    []byte // cookie
	Block     bool   // block
	Exclusive bool   // exclusive
	Lock      Lock   // alock
	Reclaim   bool   // reclaim
	State     int32  // state
}

// Encode writes a.
func (a *LockArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Block)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
	e.Bool(a.Reclaim)
	e.Int32(a.State)
}

// Decode reads a.
func (a *LockArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = netobj(d)
	a.Block = d.Bool()
	a.Exclusive = d.Bool()
	a.Lock.Decode(d)
	a.Reclaim = d.Bool()
	a.State = d.Int32()
	return d.Err()
}

// CancArgs is nlm4_cancargs (X/Open XNFS section 14.1), the argument of
// CANCEL and CANCEL_MSG: cookie, block, exclusive, alock, as in the LOCK
// being cancelled.
type CancArgs struct {
	Cookie    []byte // cookie
	Block     bool   // block
	Exclusive bool   // exclusive
	Lock      Lock   // alock
}

// Encode writes a.
func (a *CancArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	e.Bool(a.Block)
	e.Bool(a.Exclusive)
	a.Lock.Encode(e)
}

// Decode reads a.
func (a *CancArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = netobj(d)
	a.Block = d.Bool()
	a.Exclusive = d.Bool()
	return a.Lock.Decode(d)
}

// UnlockArgs is nlm4_unlockargs (X/Open XNFS section 14.1), the argument
// of UNLOCK and UNLOCK_MSG: cookie, alock.
type UnlockArgs struct {
	Cookie []byte // cookie
	Lock   Lock   // alock
}

// Encode writes a.
func (a *UnlockArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	a.Lock.Encode(e)
}

// Decode reads a.
func (a *UnlockArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = netobj(d)
	return a.Lock.Decode(d)
}

// ShareArgs is nlm4_shareargs (X/Open XNFS section 14.1), the argument of
// SHARE and UNSHARE: cookie, share (nlm4_share), reclaim (bool).
type ShareArgs struct {
	Cookie  []byte // cookie
	Share   Share  // share
	Reclaim bool   // reclaim
}

// Encode writes a.
func (a *ShareArgs) Encode(e *xdr.Encoder) {
	e.Opaque(a.Cookie)
	a.Share.Encode(e)
	e.Bool(a.Reclaim)
}

// Decode reads a.
func (a *ShareArgs) Decode(d *xdr.Decoder) error {
	a.Cookie = netobj(d)
	a.Share.Decode(d)
	a.Reclaim = d.Bool()
	return d.Err()
}

// NotifyArgs is nlm4_notify (X/Open XNFS section 14.1), the argument of
// FREE_ALL: name (the client host whose locks to free, at most MaxStrLen
// bytes), state (its new NSM state number).
type NotifyArgs struct {
	Name  string // name
	State int32  // state
}

// Encode writes a.
func (a *NotifyArgs) Encode(e *xdr.Encoder) {
	e.String(a.Name)
	e.Int32(a.State)
}

// Decode reads a.
func (a *NotifyArgs) Decode(d *xdr.Decoder) error {
	a.Name = d.String(MaxStrLen)
	a.State = d.Int32()
	return d.Err()
}

// SMStatus is the argument of NSM_NOTIFY (16), the callback a local NSM
// makes for a host monitored with SM_MON when that host reboots (NSM's
// "status": mon_name string of at most MaxStrLen bytes, state int, priv
// opaque[16], the private data given to SM_MON). Linux
// fs/lockd/svc4proc.c nlm4svc_proc_sm_notify.
type SMStatus struct {
	MonName string           // mon_name
	State   int32            // state
	Priv    [SMPrivSize]byte // priv
}

// Encode writes s.
func (s *SMStatus) Encode(e *xdr.Encoder) {
	e.String(s.MonName)
	e.Int32(s.State)
	e.Fixed(s.Priv[:])
}

// Decode reads s.
func (s *SMStatus) Decode(d *xdr.Decoder) error {
	s.MonName = d.String(MaxStrLen)
	s.State = d.Int32()
	s.Priv = [SMPrivSize]byte{}
	copy(s.Priv[:], d.Fixed(SMPrivSize))
	return d.Err()
}
