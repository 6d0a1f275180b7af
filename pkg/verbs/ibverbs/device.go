//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Info describes one RDMA device as libibverbs reports it
// (ibv_query_device(3), ibv_query_port(3) on port 1).
type Info struct {
	Name      string // kernel device name, e.g. "mlx5_0", "rxe0", "siw0"
	Transport string // "iwarp", "roce" or "ib"
	NodeGUID  uint64 // host byte order
	FWVersion string
	PortState string // "ACTIVE", "DOWN", ... of port 1
	// Limits from struct ibv_device_attr.
	MaxQP, MaxQPWR, MaxSGE, MaxCQE int
	MaxMRSize                      uint64
	MaxQPRdAtom, MaxQPInitRdAtom   int // IRD / ORD per QP
	VendorID, VendorPartID         uint32
	// MemWindow2 is true when the device binds type 2 memory windows
	// (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B): the provider then exposes remote
	// STags as memory windows, which Local Invalidate and Send With
	// Invalidate can invalidate.
	MemWindow2 bool
}

// Devices lists the RDMA devices librdmacm opened (rdma_get_devices(3)).
// It returns an empty list, not an error, on a host without devices.
func Devices() ([]Info, error) {
	ctxs, err := contexts()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(ctxs))
	for _, c := range ctxs {
		inf, err := query(c)
		if err != nil {
			return nil, err
		}
		out = append(out, inf)
	}
	return out, nil
}

var (
	ctxOnce sync.Once
	ctxList []*C.struct_ibv_context
	ctxErr  error
)

// contexts returns librdmacm's device contexts: the cm_ids it resolves
// carry one of these in id->verbs, so PDs, CQs and QPs must be made on
// them. They stay open for the life of the process.
func contexts() ([]*C.struct_ibv_context, error) {
	ctxOnce.Do(func() {
		var n C.int
		list := C.rdma_get_devices(&n)
		if list == nil {
			if n == 0 {
				return // no devices (or no RDMA subsystem): empty list
			}
			ctxErr = fmt.Errorf("ibverbs: rdma_get_devices failed")
			return
		}
		ctxList = append(ctxList, unsafe.Slice(list, int(n))...)
		// The list array is freed; the contexts stay open (librdmacm
		// keeps them for its cm_ids).
		C.rdma_free_devices(list)
	})
	return ctxList, ctxErr
}

func query(c *C.struct_ibv_context) (Info, error) {
	var a C.struct_ibv_device_attr
	if r := C.ibv_query_device(c, &a); r != 0 {
		return Info{}, fmt.Errorf("ibverbs: ibv_query_device(%s): %w", C.GoString(C.ibv_get_device_name(c.device)), syscall.Errno(r))
	}
	inf := Info{
		Name:            C.GoString(C.ibv_get_device_name(c.device)),
		NodeGUID:        beToHost64(uint64(C.ibv_get_device_guid(c.device))),
		FWVersion:       C.GoString(&a.fw_ver[0]),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQE:          int(a.max_cqe),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		MemWindow2:      uint64(a.device_cap_flags)&(C.IBV_DEVICE_MEM_WINDOW_TYPE_2A|C.IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0,
	}
	var p C.struct_ibv_port_attr
	if C.gv_query_port(c, 1, &p) == 0 {
		inf.PortState = C.GoString(C.ibv_port_state_str(p.state))
	}
	switch {
	case c.device.transport_type == C.IBV_TRANSPORT_IWARP:
		inf.Transport = "iwarp"
	case p.link_layer == C.IBV_LINK_LAYER_ETHERNET:
		inf.Transport = "roce"
	default:
		inf.Transport = "ib"
	}
	return inf, nil
}

func beToHost64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = v
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// Config tunes an opened device. The zero value is the default.
type Config struct {
	// NoMemoryWindows makes remote STags plain MR rkeys even on a device
	// that binds type 2 memory windows (see the package doc: such rkeys
	// cannot be invalidated on most InfiniBand/RoCE devices, so the peer
	// must not be offered Remote Invalidation).
	NoMemoryWindows bool
	// RegCacheBytes bounds the registration cache of each PD (see
	// regcache.go; memory-window mode only): 0 means DefaultRegCacheBytes,
	// negative turns the cache off.
	RegCacheBytes int
	// ResolveTimeoutMs bounds rdma_resolve_addr and rdma_resolve_route,
	// milliseconds; default 5000.
	ResolveTimeoutMs int
}

// Device is an RDMA device opened through libibverbs, with its own
// rdma_cm event channel. It implements verbs.Device and is safe for
// concurrent use.
type Device struct {
	cfg  Config
	info Info
	ctx  *C.struct_ibv_context
	mw   bool // expose remote STags as type 2 memory windows

	ch     *C.struct_rdma_event_channel
	chFile *os.File
	evDone chan struct{}

	mu     sync.RWMutex
	ids    map[uintptr]cmHandler // by rdma_cm_id address
	qps    map[uint32]*qp        // by QP number
	rkeys  map[uint32]*mr        // remote STag -> region, for invalidation
	closed atomic.Bool
	cacheCounters
}

var _ verbs.Device = (*Device)(nil)

// Open opens the device named name ("rxe0", "mlx5_0", ...). Errors:
// ErrNoDevice (wrapped) when no such device exists; libibverbs errors.
func Open(name string, cfg Config) (*Device, error) {
	ctxs, err := contexts()
	if err != nil {
		return nil, err
	}
	for _, c := range ctxs {
		if C.GoString(C.ibv_get_device_name(c.device)) != name {
			continue
		}
		inf, err := query(c)
		if err != nil {
			return nil, err
		}
		return newDevice(c, inf, cfg)
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// ErrNoDevice: no RDMA device of that name (or none at all).
var ErrNoDevice = errors.New("ibverbs: no such RDMA device")

func newDevice(c *C.struct_ibv_context, inf Info, cfg Config) (*Device, error) {
	if cfg.ResolveTimeoutMs <= 0 {
		cfg.ResolveTimeoutMs = 5000
	}
	d := &Device{cfg: cfg, info: inf, ctx: c, mw: inf.MemWindow2 && !cfg.NoMemoryWindows,
		ids: map[uintptr]cmHandler{}, qps: map[uint32]*qp{}, rkeys: map[uint32]*mr{}, evDone: make(chan struct{})}
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("ibverbs: rdma_create_event_channel: %w", errnoOr(err))
	}
	d.ch = ch
	f, err := pollable(int(d.ch.fd), "rdma_cm")
	if err != nil {
		C.rdma_destroy_event_channel(d.ch)
		return nil, err
	}
	d.chFile = f
	go d.eventLoop()
	d.startAsync()
	return d, nil
}

// pollable makes fd non-blocking and returns a dup of it registered with
// the Go runtime's poller (the dup shares the open file description, so
// readiness is the same), so that waiting for events parks a goroutine
// instead of spinning or holding an OS thread.
func pollable(fd int, name string) (*os.File, error) {
	if r := C.gv_nb_fd(C.int(fd)); r < 0 {
		return nil, fmt.Errorf("ibverbs: fcntl O_NONBLOCK: %w", syscall.Errno(-r))
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: dup: %w", err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// reportsRemoteInvalidate reports whether receive completions say which
// STag a Send With Invalidate invalidated: libsiw (rdma-core 44) clears
// wc_flags, so on siw they do not, and Valid() does not see it.
func (d *Device) reportsRemoteInvalidate() bool {
	return d.info.Transport != "iwarp" || d.info.VendorID != siwVendorID
}

// siwVendorID is Linux siw's vendor_id ("bmt").
const siwVendorID = 0x626d74

// Info returns what libibverbs reported about the device.
func (d *Device) Info() Info { return d.info }

// MemoryWindows reports whether remote STags are type 2 memory windows.
func (d *Device) MemoryWindows() bool { return d.mw }

// Name is the kernel device name (ibv_get_device_name(3)), e.g. "rxe0".
func (d *Device) Name() string { return d.info.Name }

// Transport is "iwarp" (IBV_TRANSPORT_IWARP), "roce" (InfiniBand transport
// over an Ethernet link layer) or "ib".
func (d *Device) Transport() string { return d.info.Transport }

// AllocPD allocates a protection domain (ibv_alloc_pd(3)).
func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	p, err := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, fmt.Errorf("ibverbs: ibv_alloc_pd: %w", errnoOr(err))
	}
	pp := &pd{dev: d, pd: p}
	if d.mw && d.cfg.RegCacheBytes >= 0 {
		lim := int64(d.cfg.RegCacheBytes)
		if lim == 0 {
			lim = DefaultRegCacheBytes
		}
		pp.cache = &regCache{dev: d, pd: pp, limit: lim}
	}
	return pp, nil
}

// Close stops the device's connection-manager event loop. Queue pairs,
// CQs and PDs must be closed first.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stopAsync()
	d.chFile.Close()
	<-d.evDone
	C.rdma_destroy_event_channel(d.ch)
	return nil
}

// errnoOr returns the errno cgo captured with a call, or a generic error
// when the library failed without setting errno.
func errnoOr(err error) error {
	if err != nil {
		return err
	}
	return errors.New("failed without errno")
}

func (d *Device) regQP(q *qp) {
	d.mu.Lock()
	d.qps[q.num] = q
	d.mu.Unlock()
}

func (d *Device) unregQP(q *qp) {
	d.mu.Lock()
	if d.qps[q.num] == q {
		delete(d.qps, q.num)
	}
	d.mu.Unlock()
}

func (d *Device) qpByNum(n uint32) *qp {
	d.mu.RLock()
	q := d.qps[n]
	d.mu.RUnlock()
	return q
}

func (d *Device) setRKey(m *mr, old, key uint32) {
	d.mu.Lock()
	if old != 0 && d.rkeys[old] == m {
		delete(d.rkeys, old)
	}
	if key != 0 {
		d.rkeys[key] = m
	}
	d.mu.Unlock()
}

func (d *Device) mrByKey(key uint32) *mr {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.rkeys[key]
}

// invalidated records that key no longer works (a Local Invalidate posted
// or a Send With Invalidate received).
func (d *Device) invalidated(key uint32) {
	d.mu.RLock()
	m := d.rkeys[key]
	d.mu.RUnlock()
	if m != nil && m.rkey.Load() == key {
		m.valid.Store(false)
	}
}
