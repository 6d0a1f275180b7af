package siw

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Config tunes a software iWARP device. The zero value is what Linux siw
// does by default (MPA revision 2 with the enhanced setup and peer-to-peer
// RTR, no markers, FPDUs sized to the path MSS) except for the CRC: we ask
// for CRC32c on every connection, while siw's default (mpa_crc_required
// off) does not ask but honours a peer that does, so that our connections
// to siw carry the CRC too (MPA uses it when either end asks, see NoCRC).
type Config struct {
	// Name is the device name; default "siw0".
	Name string
	// NoCRC asks the peer to turn CRC32c off. CRC stays on unless both ends
	// ask for that (RFC 5044 section 4.4).
	NoCRC bool
	// Markers makes us require MPA markers in the stream we receive (RFC
	// 5044 section 4.3). Linux siw refuses markers.
	Markers bool
	// MaxULPDU is the largest ULPDU (FPDU payload incl. DDP/RDMAP header) we
	// send, bytes, 128..64768, fixed for the connection's life. 0: the
	// MULPDU (RFC 5044 section 4.5) of the connection's MSS as TCP reports
	// it (TCP_MAXSEG), read again as the connection runs, as Linux siw
	// sizes each FPDU by the socket's current MSS. Larger than the path
	// allows only toward peers that take it (two ends of this stack).
	MaxULPDU int
	// Revision1 makes Connect send an MPA revision 1 request (no IRD/ORD
	// block, no RTR). knfsd and siw refuse it; for testing only.
	Revision1 bool
	// NoP2P makes Connect not ask for peer-to-peer mode (no RTR message).
	NoP2P bool
	// ReadRTR makes Connect offer a zero-length RDMA Read as the RTR
	// instead of a zero-length RDMA Write (RFC 6581 section 3). It needs
	// an ORD of at least 1.
	ReadRTR bool
	// RTRDelay is the pause between receiving the MPA reply and sending the
	// RTR: Linux siw installs its RTR reader only after it sent the reply
	// and misses an RTR that comes at once. 0 means DefaultRTRDelay;
	// negative means no pause (peers that are this stack).
	RTRDelay time.Duration
	// HandshakeTimeout bounds the MPA exchange and the wait for the RTR;
	// default 10 s.
	HandshakeTimeout time.Duration
	// KeepAlive is the TCP keepalive period; default 15 s.
	KeepAlive time.Duration
	// UserTimeout is TCP_USER_TIMEOUT: a peer that acknowledges nothing for
	// this long fails the connection; default 30 s.
	UserTimeout time.Duration
}

// DefaultRTRDelay is the pause before the RTR when Config.RTRDelay is 0.
const DefaultRTRDelay = 150 * time.Millisecond

// MaxIRDORD is the largest IRD or ORD this provider negotiates (as Linux siw).
const MaxIRDORD = 128

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = "siw0"
	}
	if c.RTRDelay == 0 {
		c.RTRDelay = DefaultRTRDelay
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.UserTimeout == 0 {
		c.UserTimeout = 30 * time.Second
	}
	if c.MaxULPDU > maxULPDU {
		c.MaxULPDU = maxULPDU
	}
	if c.MaxULPDU != 0 && c.MaxULPDU < minULPDU {
		c.MaxULPDU = minULPDU
	}
}

// Device is a software iWARP device: one STag space, any number of PDs,
// CQs and QPs. It is safe for concurrent use.
type Device struct {
	cfg     Config
	mu      sync.RWMutex
	mrs     []*mr   // by STag index; index 0 is never used
	keys    []uint8 // last consumer key handed out per index
	free    []uint32
	spare   []*mr // closed regions, reused by RegMR (at most maxSpareMRs)
	nextQPN atomic.Uint32
	nextPD  atomic.Uint32
	closed  atomic.Bool
}

var _ verbs.Device = (*Device)(nil)

// NewDevice returns a device with cfg (zero fields take defaults).
func NewDevice(cfg Config) *Device {
	cfg.defaults()
	d := &Device{cfg: cfg, mrs: make([]*mr, 1), keys: make([]uint8, 1)}
	d.nextQPN.Store(1)
	return d
}

func (d *Device) Name() string      { return d.cfg.Name }
func (d *Device) Transport() string { return "iwarp" }

// Config returns the device's configuration with defaults applied.
func (d *Device) Config() Config { return d.cfg }

func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	return &pd{dev: d, id: d.nextPD.Add(1)}, nil
}

func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: CQ depth %d", verbs.ErrInvalidWR, depth)
	}
	return newCQ(depth), nil
}

func (d *Device) Close() error {
	d.closed.Store(true)
	return nil
}

// lookupLocked returns the region an STag names, or nil when no region is
// registered under it or its consumer key does not match. It does not look
// at validity or access rights. Called with d.mu held (read or write): a
// region's fields are only stable under the lock, since a closed region's
// struct is reused by a later RegMR.
func (d *Device) lookupLocked(stag uint32) *mr {
	idx := stag >> 8
	if idx == 0 || int(idx) >= len(d.mrs) {
		return nil
	}
	m := d.mrs[idx]
	if m == nil || uint8(m.key.Load()) != uint8(stag) {
		return nil
	}
	return m
}

// stagCheck is the outcome of resolving an STag.
type stagCheck uint8

const (
	stagOK      stagCheck = iota
	stagInvalid           // not registered, wrong consumer key, or invalidated
	stagOtherPD           // registered in another protection domain
	stagAccess            // lacks a needed access right
	stagBounds            // the bytes are not all inside the region
)

// resolve returns the n bytes at tagged offset to of the valid region stag
// names, in protection domain p and with the rights need, or why not (in
// the order the checks are made: validity, PD, access, bounds). It holds
// the lock throughout, so that a region closed meanwhile (whose struct a
// later RegMR may reuse) is never mixed up with its successor; the bytes
// returned stay the memory that was registered under stag.
func (d *Device) resolve(stag uint32, p *pd, to uint64, n uint32, need verbs.Access) ([]byte, stagCheck) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.lookupLocked(stag)
	switch {
	case m == nil || !m.valid.Load():
		return nil, stagInvalid
	case m.pd != p:
		return nil, stagOtherPD
	case m.access&need != need:
		return nil, stagAccess
	}
	b, ok := m.span(to, n)
	if !ok {
		return nil, stagBounds
	}
	return b, stagOK
}

// invalidate invalidates the region stag names when it belongs to p (an
// invalid one stays invalid), and reports whether it did.
func (d *Device) invalidate(stag uint32, p *pd) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.lookupLocked(stag)
	if m == nil || m.pd != p {
		return false
	}
	m.valid.Store(false)
	return true
}

const maxMRIndex = 1<<24 - 1

// maxSpareMRs bounds the closed region structs a device keeps for reuse.
const maxSpareMRs = 1024

// register registers buf under a fresh STag: a free index (or a new one)
// whose consumer key moves on, so that no STag handed out before names the
// new registration. The region struct is a spare one when there is one: a
// per-call registration then does not allocate.
func (d *Device) register(p *pd, buf []byte, access verbs.Access) (*mr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var idx uint32
	if n := len(d.free); n > 0 {
		idx = d.free[n-1]
		d.free = d.free[:n-1]
	} else {
		if len(d.mrs) > maxMRIndex {
			return nil, fmt.Errorf("siw: out of STag indices")
		}
		idx = uint32(len(d.mrs))
		d.mrs = append(d.mrs, nil)
		d.keys = append(d.keys, 0)
	}
	var m *mr
	if n := len(d.spare); n > 0 {
		m = d.spare[n-1]
		d.spare[n-1] = nil
		d.spare = d.spare[:n-1]
	} else {
		m = &mr{dev: d}
	}
	m.pd, m.buf, m.access = p, buf, access
	d.keys[idx]++ // a new registration never reuses the last key of its index
	m.index = idx
	m.key.Store(uint32(d.keys[idx]))
	m.iova = uint64(idx) << 40
	m.valid.Store(true)
	d.mrs[idx] = m
	return m, nil
}

func (d *Device) rekey(m *mr) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mrs[m.index] != m {
		return m.stag() // closed: no new STag
	}
	d.keys[m.index]++
	m.key.Store(uint32(d.keys[m.index]))
	m.valid.Store(true)
	return m.index<<8 | uint32(d.keys[m.index])
}

// deregister invalidates and unregisters m, forgets its memory and keeps
// the struct for a later registration. Closing it again (before it is
// reused) does nothing.
func (d *Device) deregister(m *mr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mrs[m.index] != m {
		return
	}
	m.valid.Store(false)
	d.mrs[m.index] = nil
	d.free = append(d.free, m.index)
	m.pd, m.buf = nil, nil
	if len(d.spare) < maxSpareMRs {
		d.spare = append(d.spare, m)
	}
}

// pd is a protection domain.
type pd struct {
	dev *Device
	id  uint32
}

// RegMR registers buf under a fresh STag (an index's consumer key moves on
// with every registration). The region value may be one a Close gave back:
// in the steady state, registering per call does not allocate.
func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", verbs.ErrInvalidWR)
	}
	m, err := p.dev.register(p, buf, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	return newQP(p, attr)
}

func (p *pd) Close() error { return nil }

// mr is a registered memory region. Its fields change only under the
// device's lock: Close returns the struct to the device, and a later RegMR
// reuses it under a new STag.
type mr struct {
	dev    *Device
	pd     *pd
	buf    []byte
	iova   uint64
	access verbs.Access
	index  uint32
	key    atomic.Uint32
	valid  atomic.Bool
}

func (m *mr) stag() uint32         { return m.index<<8 | m.key.Load()&0xff }
func (m *mr) LKey() uint32         { return m.stag() }
func (m *mr) RKey() uint32         { return m.stag() }
func (m *mr) Addr() uint64         { return m.iova }
func (m *mr) Len() int             { return len(m.buf) }
func (m *mr) Bytes() []byte        { return m.buf }
func (m *mr) Access() verbs.Access { return m.access }
func (m *mr) Valid() bool          { return m.valid.Load() }
func (m *mr) Rekey() uint32        { return m.dev.rekey(m) }
func (m *mr) Close() error         { m.dev.deregister(m); return nil }
func (m *mr) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.iova + uint64(off), Length: uint32(n), LKey: m.stag()}
}

// span returns the n bytes at tagged offset to, or ok=false when they are
// not all inside the region (base and bounds, RFC 5040 section 6.4).
func (m *mr) span(to uint64, n uint32) ([]byte, bool) {
	if to < m.iova {
		return nil, false
	}
	off := to - m.iova
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// resolveLocal maps an SGE to memory for a local access: the lkey must name
// a valid region of pd with the needed rights, and the bytes must be inside.
func (d *Device) resolveLocal(p *pd, s verbs.SGE, need verbs.Access) ([]byte, verbs.WCStatus, error) {
	b, why := d.resolve(s.LKey, p, s.Addr, s.Length, need)
	switch why {
	case stagOK:
		return b, verbs.WCSuccess, nil
	case stagAccess:
		return nil, verbs.WCLocProtErr, fmt.Errorf("%w: lkey 0x%08x lacks local write access", verbs.ErrInvalidKey, s.LKey)
	case stagBounds:
		return nil, verbs.WCLocLenErr, fmt.Errorf("siw: SGE [0x%x,+%d) outside region lkey 0x%08x", s.Addr, s.Length, s.LKey)
	}
	return nil, verbs.WCLocProtErr, fmt.Errorf("%w: lkey 0x%08x", verbs.ErrInvalidKey, s.LKey)
}
