package nsm

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// SMName is sm_name, the argument of SM_STAT: mon_name, a host name of at
// most MaxStrLen bytes (4..1028 bytes encoded).
type SMName struct {
	MonName string // mon_name
}

// Encode writes n.
func (n *SMName) Encode(e *xdr.Encoder) { e.String(n.MonName) }

// Decode reads n.
func (n *SMName) Decode(d *xdr.Decoder) error {
	n.MonName = d.String(MaxStrLen)
	return d.Err()
}

// MyID is my_id, the argument of SM_UNMON_ALL and part of MonID: the
// local host (my_name, at most MaxStrLen bytes) and the RPC procedure the
// NSM calls when a monitored host changes state (my_prog, my_vers,
// my_proc, 4 bytes each).
type MyID struct {
	MyName string // my_name
	MyProg uint32 // my_prog
	MyVers uint32 // my_vers
	MyProc uint32 // my_proc
}

// Encode writes m.
func (m *MyID) Encode(e *xdr.Encoder) {
	e.String(m.MyName)
	e.Uint32(m.MyProg)
	e.Uint32(m.MyVers)
	e.Uint32(m.MyProc)
}

// Decode reads m.
func (m *MyID) Decode(d *xdr.Decoder) error {
	m.MyName = d.String(MaxStrLen)
	m.MyProg = d.Uint32()
	m.MyVers = d.Uint32()
	m.MyProc = d.Uint32()
	return d.Err()
}

// MonID is mon_id, the argument of SM_UNMON: the host to monitor
// (mon_name, at most MaxStrLen bytes) and who asks (my_id).
type MonID struct {
	MonName string // mon_name
	MyID    MyID   // my_id
}

// Encode writes m.
func (m *MonID) Encode(e *xdr.Encoder) {
	e.String(m.MonName)
	m.MyID.Encode(e)
}

// Decode reads m.
func (m *MonID) Decode(d *xdr.Decoder) error {
	m.MonName = d.String(MaxStrLen)
	return m.MyID.Decode(d)
}

// Mon is mon, the argument of SM_MON: mon_id and 16 bytes of private data
// (priv) handed back in the state-change callback.
type Mon struct {
	MonID MonID          // mon_id
	Priv  [PrivSize]byte // priv
}

// Encode writes m.
func (m *Mon) Encode(e *xdr.Encoder) {
	m.MonID.Encode(e)
	e.Fixed(m.Priv[:])
}

// Decode reads m.
func (m *Mon) Decode(d *xdr.Decoder) error {
	m.MonID.Decode(d)
	m.Priv = [PrivSize]byte{}
	copy(m.Priv[:], d.Fixed(PrivSize))
	return d.Err()
}

// StatRes is sm_stat_res, the result of SM_STAT and SM_MON: res_stat (4
// bytes, StatSucc or StatFail) and state, the NSM's own state number (odd
// while the host is up, incremented at each restart). Decode keeps any
// res_stat value.
type StatRes struct {
	Res   Res   // res_stat
	State int32 // state
}

// Encode writes r.
func (r *StatRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Res))
	e.Int32(r.State)
}

// Decode reads r.
func (r *StatRes) Decode(d *xdr.Decoder) error {
	r.Res = Res(d.Uint32())
	r.State = d.Int32()
	return d.Err()
}

// Stat is sm_stat, the result of SM_UNMON and SM_UNMON_ALL: the NSM's
// state number (4 bytes).
type Stat struct {
	State int32 // state
}

// Encode writes s.
func (s *Stat) Encode(e *xdr.Encoder) { e.Int32(s.State) }

// Decode reads s.
func (s *Stat) Decode(d *xdr.Decoder) error {
	s.State = d.Int32()
	return d.Err()
}

// StatChge is stat_chge, the argument of SM_NOTIFY: the host that
// restarted (mon_name, at most MaxStrLen bytes) and its new state number.
type StatChge struct {
	MonName string // mon_name
	State   int32  // state
}

// Encode writes s.
func (s *StatChge) Encode(e *xdr.Encoder) {
	e.String(s.MonName)
	e.Int32(s.State)
}

// Decode reads s.
func (s *StatChge) Decode(d *xdr.Decoder) error {
	s.MonName = d.String(MaxStrLen)
	s.State = d.Int32()
	return d.Err()
}
