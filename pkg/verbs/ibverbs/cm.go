//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// cmEvent is a copy of an rdma_cm_event (rdma_get_cm_event(3)); the event
// itself was acknowledged already.
type cmEvent struct {
	typ      C.int
	status   int
	id       *C.struct_rdma_cm_id
	listenID *C.struct_rdma_cm_id
	pdata    []byte
	rr, ird  int // conn.responder_resources, conn.initiator_depth
}

func (e *cmEvent) name() string { return C.GoString(C.rdma_event_str(uint32(e.typ))) }

type cmHandler interface{ cmEvent(*cmEvent) }

func (d *Device) addHandler(id *C.struct_rdma_cm_id, h cmHandler) {
	d.mu.Lock()
	d.ids[uintptr(unsafe.Pointer(id))] = h
	d.mu.Unlock()
}

func (d *Device) delHandler(id *C.struct_rdma_cm_id) {
	d.mu.Lock()
	delete(d.ids, uintptr(unsafe.Pointer(id)))
	d.mu.Unlock()
}

func (d *Device) handler(id uintptr) cmHandler {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.ids[id]
}

// eventLoop reads the device's rdma_cm event channel. Its fd is
// non-blocking and in the Go poller: the goroutine parks between events.
func (d *Device) eventLoop() {
	defer close(d.evDone)
	rc, err := d.chFile.SyscallConn()
	if err != nil {
		return
	}
	ev := (*C.struct_cmev)(C.calloc(1, C.sizeof_struct_cmev))
	defer C.free(unsafe.Pointer(ev))
	rc.Read(func(uintptr) bool {
		for {
			r := C.gv_get_cm_event(d.ch, ev)
			if r == 0 {
				return false
			}
			if r < 0 {
				return true
			}
			e := &cmEvent{typ: ev.event, status: int(ev.status),
				id: ev.id, listenID: ev.listen_id,
				rr: int(ev.responder_resources), ird: int(ev.initiator_depth)}
			if ev.pdata_len > 0 {
				e.pdata = C.GoBytes(unsafe.Pointer(&ev.pdata[0]), ev.pdata_len)
			}
			key := uintptr(unsafe.Pointer(ev.id))
			if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
				key = uintptr(unsafe.Pointer(ev.listen_id))
			}
			if h := d.handler(key); h != nil {
				h.cmEvent(e)
			} else if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
				C.gv_cm_reject(e.id, nil, 0)
				C.gv_cm_destroy_id(e.id)
			}
		}
	})
}

// connHandler collects the events of a connection being set up; once the
// QP is attached, events go to it.
type connHandler struct {
	mu sync.Mutex
	ch chan *cmEvent
	q  *qp
}

func newConnHandler() *connHandler { return &connHandler{ch: make(chan *cmEvent, 16)} }

func (h *connHandler) cmEvent(e *cmEvent) {
	h.mu.Lock()
	q := h.q
	h.mu.Unlock()
	if q != nil {
		q.cmEvent(e)
		return
	}
	select {
	case h.ch <- e:
	default:
	}
}

// attach hands later events to q, and events that raced in to it.
func (h *connHandler) attach(q *qp) {
	h.mu.Lock()
	h.q = q
	h.mu.Unlock()
	for {
		select {
		case e := <-h.ch:
			q.cmEvent(e)
		default:
			return
		}
	}
}

// wait returns the next event of h, or an error when ctx ends.
func (h *connHandler) wait(ctx context.Context, what string) (*cmEvent, error) {
	select {
	case e := <-h.ch:
		return e, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", verbs.ErrTimeout, what, ctx.Err())
	}
}

func resolveIP(ctx context.Context, host string) (netip.Addr, error) {
	if host == "" {
		return netip.IPv4Unspecified(), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range as {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("ibverbs: %s has no address", host)
	}
	return as[0], nil
}

func splitAddr(ctx context.Context, addr string) (netip.Addr, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return netip.Addr{}, 0, fmt.Errorf("ibverbs: bad port in %q", addr)
	}
	ip, err := resolveIP(ctx, host)
	return ip, port, err
}

func ipBytes(ip netip.Addr) (*C.uchar, C.int, func()) {
	b := ip.AsSlice()
	p := C.CBytes(b)
	return (*C.uchar)(p), C.int(len(b)), func() { C.free(p) }
}

func cmAddr(id *C.struct_rdma_cm_id, peer bool) net.Addr {
	var ip [16]C.uchar
	var port C.int
	pr := C.int(0)
	if peer {
		pr = 1
	}
	n := C.gv_cm_sockaddr(id, pr, &ip[0], &port)
	if n != 4 && n != 16 {
		return &net.TCPAddr{}
	}
	b := C.GoBytes(unsafe.Pointer(&ip[0]), n)
	return &net.TCPAddr{IP: net.IP(b), Port: int(port)}
}

func cbytes(b []byte) (unsafe.Pointer, C.int, func()) {
	if len(b) == 0 {
		return nil, 0, func() {}
	}
	p := C.CBytes(b)
	return p, C.int(len(b)), func() { C.free(p) }
}

func (d *Device) clampRR(v int) int {
	v = max(v, 0)
	if d.info.MaxQPRdAtom > 0 {
		v = min(v, d.info.MaxQPRdAtom)
	}
	return min(v, 255)
}

func (d *Device) clampID(v int) int {
	v = max(v, 0)
	if d.info.MaxQPInitRdAtom > 0 {
		v = min(v, d.info.MaxQPInitRdAtom)
	}
	return min(v, 255)
}

func statusErr(status int) error {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return fmt.Errorf("status %d", status)
}

// Connect connects qp, in INIT, to the listener at addr ("host:port")
// through librdmacm: rdma_resolve_addr(3), rdma_resolve_route(3),
// rdma_connect(3) with the cm_id's qp set to qp (librdmacm moves an
// InfiniBand/RoCE QP through RTR and RTS; iWARP's kernel CM does it
// itself). The address must be reached through this device (rdma_cm picks
// the device by the local interface of the route). Errors: a
// *verbs.RejectError (ErrRejected) with the peer's private data and
// reject reason (also for iWARP's "connection refused": no
// listener); ErrTimeout for ctx, an address or route that does not resolve
// in time, or an unreachable peer; ErrInvalidWR for a QP of another device
// or over-long private data; ErrQPState when qp is not INIT.
func (d *Device) Connect(ctx context.Context, addr string, vqp verbs.QP, p verbs.ConnParam) (verbs.ConnInfo, error) {
	q, ok := vqp.(*qp)
	if !ok || q.dev != d {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP of another device", verbs.ErrInvalidWR)
	}
	if q.State() != verbs.QPInit || q.id != nil {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP %d is %v", verbs.ErrQPState, q.num, q.State())
	}
	if len(p.PrivateData) > verbs.MaxPrivateData {
		return verbs.ConnInfo{}, fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalidWR, len(p.PrivateData))
	}
	if d.info.Transport != "iwarp" && len(p.PrivateData) > ibMaxREQPrivateData {
		return verbs.ConnInfo{}, fmt.Errorf("%w: %d bytes of private data; an InfiniBand CM REQ through rdma_cm carries at most %d", verbs.ErrInvalidWR, len(p.PrivateData), ibMaxREQPrivateData)
	}
	ip, port, err := splitAddr(ctx, addr)
	if err != nil {
		return verbs.ConnInfo{}, fmt.Errorf("ibverbs: connect %s: %w", addr, err)
	}
	h := newConnHandler()
	var id *C.struct_rdma_cm_id
	if r := C.gv_cm_create_id(d.ch, &id); r != 0 {
		return verbs.ConnInfo{}, fmt.Errorf("ibverbs: rdma_create_id: %w", syscall.Errno(-r))
	}
	d.addHandler(id, h)
	ok = false
	defer func() {
		if !ok {
			d.delHandler(id)
			C.gv_cm_destroy_id(id)
		}
	}()
	ipb, ipn, free := ipBytes(ip)
	defer free()
	if r := C.gv_cm_resolve_addr(id, ipb, ipn, C.int(port), C.int(d.cfg.ResolveTimeoutMs)); r != 0 {
		return verbs.ConnInfo{}, fmt.Errorf("ibverbs: rdma_resolve_addr %s: %w", addr, syscall.Errno(-r))
	}
	e, err := h.wait(ctx, "resolving "+addr)
	if err != nil {
		return verbs.ConnInfo{}, err
	}
	if e.typ != C.RDMA_CM_EVENT_ADDR_RESOLVED {
		return verbs.ConnInfo{}, fmt.Errorf("%w: resolving %s: %s: %w", verbs.ErrTimeout, addr, e.name(), statusErr(e.status))
	}
	if v := C.gv_id_verbs(id); v != d.ctx {
		name := "?"
		if v != nil {
			name = C.GoString(C.ibv_get_device_name(v.device))
		}
		return verbs.ConnInfo{}, fmt.Errorf("%w: %s is reached through RDMA device %s, not %s", ErrWrongDevice, addr, name, d.info.Name)
	}
	if r := C.gv_cm_resolve_route(id, C.int(d.cfg.ResolveTimeoutMs)); r != 0 {
		return verbs.ConnInfo{}, fmt.Errorf("ibverbs: rdma_resolve_route %s: %w", addr, syscall.Errno(-r))
	}
	if e, err = h.wait(ctx, "route to "+addr); err != nil {
		return verbs.ConnInfo{}, err
	}
	if e.typ != C.RDMA_CM_EVENT_ROUTE_RESOLVED {
		return verbs.ConnInfo{}, fmt.Errorf("%w: route to %s: %s: %w", verbs.ErrTimeout, addr, e.name(), statusErr(e.status))
	}
	C.gv_set_id_qp(id, q.qp)
	rr, ord := d.clampRR(p.ResponderResources), d.clampID(p.InitiatorDepth)
	pd, pdn, pfree := cbytes(p.PrivateData)
	defer pfree()
	if r := C.gv_cm_connect(id, pd, pdn, C.int(rr), C.int(ord)); r != 0 {
		return verbs.ConnInfo{}, fmt.Errorf("ibverbs: rdma_connect %s: %w", addr, syscall.Errno(-r))
	}
	if e, err = h.wait(ctx, "connecting to "+addr); err != nil {
		return verbs.ConnInfo{}, err
	}
	switch e.typ {
	case C.RDMA_CM_EVENT_ESTABLISHED:
	case C.RDMA_CM_EVENT_REJECTED:
		return verbs.ConnInfo{}, &verbs.RejectError{PrivateData: e.pdata,
			Reason: fmt.Sprintf("%s (status %d) from %s", rejectReason(d.info.Transport, e.status), e.status, addr)}
	case C.RDMA_CM_EVENT_UNREACHABLE:
		return verbs.ConnInfo{}, fmt.Errorf("%w: %s unreachable: %w", verbs.ErrTimeout, addr, statusErr(e.status))
	default:
		return verbs.ConnInfo{}, fmt.Errorf("%w: connecting to %s: %s: %w", verbs.ErrProtocol, addr, e.name(), statusErr(e.status))
	}
	ok = true
	q.established(id)
	h.attach(q)
	if e.rr > 0 {
		ord = min(ord, e.rr)
	}
	return verbs.ConnInfo{PrivateData: e.pdata, IRD: rr, ORD: ord,
		Path: fmt.Sprintf("%s over %s port %d, QP %d", d.info.Transport, d.info.Name, int(C.gv_id_port(id)), q.num)}, nil
}

// Private data limits of the InfiniBand CM through rdma_cm (IBA 12.7 less
// rdma_cm's 36-byte header in a REQ; librdmacm's RDMA_MAX_PRIVATE_DATA
// table): REQ 56, REP 196, REJ 148 bytes. iWARP (MPA) carries up to 512.
const (
	ibMaxREQPrivateData = 56
	ibMaxREPPrivateData = 196
	ibMaxREJPrivateData = 148
)

// ErrWrongDevice: the address is reached through another RDMA device
// than the one the call was made on (rdma_cm chooses by route).
var ErrWrongDevice = errors.New("ibverbs: address on another RDMA device")

// listener is a listening cm_id (rdma_bind_addr(3), rdma_listen(3)).
type listener struct {
	dev    *Device
	id     *C.struct_rdma_cm_id
	addr   net.Addr
	reqs   chan *connReq
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

// Listen listens for connection requests on addr ("host:port"; an empty
// host or 0.0.0.0 listens on every RDMA device, and requests arriving on
// another device than d are refused; port 0 picks one). Errors: librdmacm
// errno (EADDRINUSE, EADDRNOTAVAIL: no RDMA device has that address).
func (d *Device) Listen(ctx context.Context, addr string) (verbs.Listener, error) {
	ip, port, err := splitAddr(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: listen %s: %w", addr, err)
	}
	var id *C.struct_rdma_cm_id
	if r := C.gv_cm_create_id(d.ch, &id); r != 0 {
		return nil, fmt.Errorf("ibverbs: rdma_create_id: %w", syscall.Errno(-r))
	}
	l := &listener{dev: d, id: id, reqs: make(chan *connReq, 64), done: make(chan struct{})}
	d.addHandler(id, l)
	ipb, ipn, free := ipBytes(ip)
	defer free()
	if r := C.gv_cm_bind(id, ipb, ipn, C.int(port)); r != 0 {
		d.delHandler(id)
		C.gv_cm_destroy_id(id)
		return nil, fmt.Errorf("ibverbs: rdma_bind_addr %s: %w", addr, syscall.Errno(-r))
	}
	if v := C.gv_id_verbs(id); v != nil && v != d.ctx {
		d.delHandler(id)
		C.gv_cm_destroy_id(id)
		return nil, fmt.Errorf("%w: %s belongs to RDMA device %s, not %s", ErrWrongDevice, addr, C.GoString(C.ibv_get_device_name(v.device)), d.info.Name)
	}
	if r := C.gv_cm_listen(id, 64); r != 0 {
		d.delHandler(id)
		C.gv_cm_destroy_id(id)
		return nil, fmt.Errorf("ibverbs: rdma_listen %s: %w", addr, syscall.Errno(-r))
	}
	l.addr = cmAddr(id, false)
	return l, nil
}

func (l *listener) cmEvent(e *cmEvent) {
	if e.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST {
		return
	}
	d := l.dev
	if C.gv_id_verbs(e.id) != d.ctx {
		C.gv_cm_reject(e.id, nil, 0)
		C.gv_cm_destroy_id(e.id)
		return
	}
	r := &connReq{dev: d, id: e.id, h: newConnHandler(), pdata: e.pdata,
		param:  verbs.ConnParam{PrivateData: e.pdata, ResponderResources: e.rr, InitiatorDepth: e.ird},
		remote: cmAddr(e.id, true)}
	d.addHandler(e.id, r.h)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		select {
		case l.reqs <- r:
			return
		default:
		}
	}
	d.delHandler(e.id)
	C.gv_cm_reject(e.id, nil, 0)
	C.gv_cm_destroy_id(e.id)
}

func (l *listener) Accept(ctx context.Context) (verbs.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, verbs.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Addr() net.Addr { return l.addr }

// Close stops listening (rdma_destroy_id(3)) and rejects queued requests.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	l.dev.delHandler(l.id)
	C.gv_cm_destroy_id(l.id)
	for {
		select {
		case r := <-l.reqs:
			r.Reject(nil)
		default:
			return nil
		}
	}
}

// connReq is an incoming connection request: a new cm_id.
type connReq struct {
	dev    *Device
	id     *C.struct_rdma_cm_id
	h      *connHandler
	pdata  []byte
	param  verbs.ConnParam
	remote net.Addr
	once   sync.Once
}

func (r *connReq) PrivateData() []byte    { return r.pdata }
func (r *connReq) Param() verbs.ConnParam { return r.param }
func (r *connReq) RemoteAddr() net.Addr   { return r.remote }

// Accept connects qp (INIT) with rdma_accept(3) and returns once the
// connection is ESTABLISHED. Our ORD is at most the requester's IRD.
// Errors: ErrTimeout (ctx), ErrProtocol (the connection failed), ErrInvalidWR.
func (r *connReq) Accept(ctx context.Context, vqp verbs.QP, p verbs.ConnParam) (verbs.ConnInfo, error) {
	d := r.dev
	q, ok := vqp.(*qp)
	if !ok || q.dev != d {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP of another device", verbs.ErrInvalidWR)
	}
	if q.State() != verbs.QPInit || q.id != nil {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP %d is %v", verbs.ErrQPState, q.num, q.State())
	}
	if len(p.PrivateData) > verbs.MaxPrivateData || (d.info.Transport != "iwarp" && len(p.PrivateData) > ibMaxREPPrivateData) {
		return verbs.ConnInfo{}, fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalidWR, len(p.PrivateData))
	}
	used := false
	r.once.Do(func() { used = true })
	if !used {
		return verbs.ConnInfo{}, fmt.Errorf("%w: request already answered", verbs.ErrInvalidWR)
	}
	rr, ord := d.clampRR(p.ResponderResources), d.clampID(p.InitiatorDepth)
	if r.param.ResponderResources > 0 {
		ord = min(ord, r.param.ResponderResources)
	}
	C.gv_set_id_qp(r.id, q.qp)
	pd, pdn, pfree := cbytes(p.PrivateData)
	defer pfree()
	fail := func(err error) (verbs.ConnInfo, error) {
		d.delHandler(r.id)
		C.gv_cm_destroy_id(r.id)
		return verbs.ConnInfo{}, err
	}
	if rc := C.gv_cm_accept(r.id, pd, pdn, C.int(rr), C.int(ord)); rc != 0 {
		return fail(fmt.Errorf("ibverbs: rdma_accept: %w", syscall.Errno(-rc)))
	}
	e, err := r.h.wait(ctx, "accepting "+r.remote.String())
	if err != nil {
		return fail(err)
	}
	if e.typ != C.RDMA_CM_EVENT_ESTABLISHED {
		return fail(fmt.Errorf("%w: accepting %v: %s: %w", verbs.ErrProtocol, r.remote, e.name(), statusErr(e.status)))
	}
	q.established(r.id)
	r.h.attach(q)
	return verbs.ConnInfo{PrivateData: r.pdata, IRD: rr, ORD: ord,
		Path: fmt.Sprintf("%s over %s port %d, QP %d", d.info.Transport, d.info.Name, int(C.gv_id_port(r.id)), q.num)}, nil
}

// Reject refuses the request with privateData (rdma_reject(3); on
// InfiniBand/RoCE a REJ carries at most 148 bytes, the rest is cut).
func (r *connReq) Reject(privateData []byte) error {
	used := false
	r.once.Do(func() { used = true })
	if !used {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidWR)
	}
	if r.dev.info.Transport != "iwarp" && len(privateData) > ibMaxREJPrivateData {
		privateData = privateData[:ibMaxREJPrivateData]
	}
	pd, pdn, pfree := cbytes(privateData)
	defer pfree()
	rc := C.gv_cm_reject(r.id, pd, pdn)
	r.dev.delHandler(r.id)
	C.gv_cm_destroy_id(r.id)
	if rc != 0 {
		return fmt.Errorf("ibverbs: rdma_reject: %w", syscall.Errno(-rc))
	}
	return nil
}

// rejectReason names the status of an RDMA_CM_EVENT_REJECTED: an
// InfiniBand CM REJ reason (IBA 12.6.7.2) on IB/RoCE, a negative errno on
// iWARP (ECONNREFUSED: MPA reject or no listener).
func rejectReason(transport string, status int) string {
	if status < 0 {
		return syscall.Errno(-status).Error()
	}
	switch status {
	case 28:
		return "consumer reject"
	case 8:
		return "invalid service ID (no listener)"
	case 1, 2, 3, 4:
		return "no resources at the peer"
	case 26:
		return "timeout"
	}
	return "IB CM reject reason " + strconv.Itoa(status)
}

// ResolveDevice asks rdma_cm which RDMA device it would use to reach addr
// ("host:port" or "host"): it resolves the address (rdma_resolve_addr(3),
// which picks the device by the route's local interface) on a throw-away
// cm_id and returns that device's name. Errors: the resolution's
// (RDMA_CM_EVENT_ADDR_ERROR: no RDMA device on the route; ErrTimeout),
// ErrNoDevice when the host has no RDMA device.
func ResolveDevice(ctx context.Context, addr string) (string, error) {
	ctxs, err := contexts()
	if err != nil {
		return "", err
	}
	if len(ctxs) == 0 {
		return "", fmt.Errorf("%w: the host has none", ErrNoDevice)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "0") // the route does not depend on the port
	}
	ip, port, err := splitAddr(ctx, addr)
	if err != nil {
		return "", err
	}
	// A Device's event loop does the waiting (no thread blocked in
	// rdma_get_cm_event); it is not bound to a device until resolved.
	d := &Device{cfg: Config{ResolveTimeoutMs: 3000}, ids: map[uintptr]cmHandler{}, qps: map[uint32]*qp{},
		rkeys: map[uint32]*mr{}, evDone: make(chan struct{})}
	ch, cerr := C.rdma_create_event_channel()
	if ch == nil {
		return "", fmt.Errorf("ibverbs: rdma_create_event_channel: %w", errnoOr(cerr))
	}
	d.ch = ch
	f, err := pollable(int(ch.fd), "rdma_cm")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return "", err
	}
	d.chFile = f
	go d.eventLoop()
	defer d.Close()
	h := newConnHandler()
	var id *C.struct_rdma_cm_id
	if r := C.gv_cm_create_id(d.ch, &id); r != 0 {
		return "", fmt.Errorf("ibverbs: rdma_create_id: %w", syscall.Errno(-r))
	}
	d.addHandler(id, h)
	defer func() {
		d.delHandler(id)
		C.gv_cm_destroy_id(id)
	}()
	ipb, ipn, free := ipBytes(ip)
	defer free()
	if r := C.gv_cm_resolve_addr(id, ipb, ipn, C.int(port), C.int(d.cfg.ResolveTimeoutMs)); r != 0 {
		return "", fmt.Errorf("ibverbs: rdma_resolve_addr %s: %w", addr, syscall.Errno(-r))
	}
	e, err := h.wait(ctx, "resolving "+addr)
	if err != nil {
		return "", err
	}
	if e.typ != C.RDMA_CM_EVENT_ADDR_RESOLVED {
		return "", fmt.Errorf("%w: resolving %s: %s: %w", verbs.ErrTimeout, addr, e.name(), statusErr(e.status))
	}
	v := C.gv_id_verbs(id)
	if v == nil {
		return "", fmt.Errorf("%w: %s resolved without a device", ErrNoDevice, addr)
	}
	return C.GoString(C.ibv_get_device_name(v.device)), nil
}
