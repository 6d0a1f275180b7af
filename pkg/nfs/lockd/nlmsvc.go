package lockd

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// garbage makes an argument decoding error GARBAGE_ARGS (RFC 5531 section 9).
func garbage(err error) error { return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err) }

// NLMHandlers returns the procedures of NLM version 4, indexed by
// procedure number, for sunrpc.Server.Register(nlm.Program, nlm.Version,
// ...). Served: NULL, TEST, LOCK, CANCEL, UNLOCK, the asynchronous
// TEST_MSG, LOCK_MSG, CANCEL_MSG and UNLOCK_MSG (their result is sent as
// a *_RES call to the client's NLM), GRANTED_RES, NSM_NOTIFY (from the
// local host only), NM_LOCK and FREE_ALL. GRANTED, GRANTED_MSG and the
// other *_RES are client procedures, and SHARE and UNSHARE (DOS share
// reservations) are not offered: PROC_UNAVAIL, unless Options.NodeCallbacks
// names the node's callback service, where GRANTED and GRANTED_MSG are
// relayed (relay.go). Undecodable arguments are
// GARBAGE_ARGS; every other failure is an nlm4_stats in the result.
func (m *Manager) NLMHandlers() []sunrpc.Handler {
	p := make([]sunrpc.Handler, nlm.NumProcs)
	p[nlm.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	p[nlm.ProcTest] = m.sync(m.test)
	p[nlm.ProcLock] = m.sync(m.lock)
	p[nlm.ProcCancel] = m.sync(m.cancelProc)
	p[nlm.ProcUnlock] = m.sync(m.unlock)
	p[nlm.ProcNMLock] = m.sync(m.nmLock)
	p[nlm.ProcTestMsg] = m.async(m.test, nlm.ProcTestRes)
	p[nlm.ProcLockMsg] = m.async(m.lock, nlm.ProcLockRes)
	p[nlm.ProcCancelMsg] = m.async(m.cancelProc, nlm.ProcCancelRes)
	p[nlm.ProcUnlockMsg] = m.async(m.unlock, nlm.ProcUnlockRes)
	p[nlm.ProcGrantedRes] = m.grantedRes
	p[nlm.ProcNSMNotify] = m.nsmNotify
	p[nlm.ProcFreeAll] = m.freeAll
	m.relayNLM(p)
	return p
}

// proc runs one NLM procedure on decoded arguments and returns its result.
type proc func(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error)

// sync answers the result in the reply.
func (m *Manager) sync(f proc) sunrpc.Handler {
	return func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		res, err := f(req, req.ArgsDecoder())
		if err != nil {
			return err
		}
		res.Encode(&b.Encoder)
		return nil
	}
}

// async answers void and sends the result as a call of resProc to the
// client's NLM service (X/Open XNFS section 14.3, the message procedures).
func (m *Manager) async(f proc, resProc uint32) sunrpc.Handler {
	return func(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		res, err := f(req, req.ArgsDecoder())
		if err != nil {
			return err
		}
		host := hostOf(req.Peer)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			err := m.call(host, nlm.Program, nlm.Version, resProc,
				func(b *sunrpc.Builder, _ net.Addr) { res.Encode(&b.Encoder) }, nil)
			if err != nil {
				m.log.Info("lockd: sending an asynchronous result failed", "client", host, "proc", nlm.ProcName(resProc), "err", err)
			}
		}()
		return nil
	}
}

// request checks a lock's file handle and range.
func (m *Manager) request(req *sunrpc.Request, l *nlm.Lock, exclusive bool) (Request, nlm.Stat) {
	key := string(l.FH)
	if m.opts.FileKey != nil {
		k, st := m.opts.FileKey(l.FH, req)
		if st != nlm.Granted {
			return Request{}, st
		}
		key = k
	}
	return NewRequest(key, l, exclusive, hostOf(req.Peer))
}

func (m *Manager) test(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error) {
	var a nlm.TestArgs
	if err := a.Decode(d); err != nil {
		return nil, garbage(err)
	}
	res := &nlm.TestRes{Cookie: a.Cookie}
	q, st := m.request(req, &a.Lock, a.Exclusive)
	if st != nlm.Granted {
		res.Stat = st
		return res, nil
	}
	res.Stat, res.Holder = m.Test(&q)
	return res, nil
}

func (m *Manager) lock(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error) {
	var a nlm.LockArgs
	if err := a.Decode(d); err != nil {
		return nil, garbage(err)
	}
	return m.doLock(req, &a, true), nil
}

// nmLock is NM_LOCK: a non-monitored, never blocking LOCK.
func (m *Manager) nmLock(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error) {
	var a nlm.LockArgs
	if err := a.Decode(d); err != nil {
		return nil, garbage(err)
	}
	a.Block = false
	return m.doLock(req, &a, false), nil
}

func (m *Manager) doLock(req *sunrpc.Request, a *nlm.LockArgs, monitor bool) *nlm.Res {
	res := &nlm.Res{Cookie: a.Cookie}
	q, st := m.request(req, &a.Lock, a.Exclusive)
	if st != nlm.Granted {
		res.Stat = st
		return res
	}
	if monitor {
		if err := m.Monitor(q.Owner.Caller, q.Host); err != nil {
			m.log.Warn("lockd: cannot record the client for reboot notification", "caller", q.Owner.Caller, "err", err)
			res.Stat = nlm.DeniedNoLocks
			return res
		}
	}
	res.Stat = m.Lock(&q, a.Block, a.Reclaim)
	return res
}

func (m *Manager) cancelProc(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error) {
	var a nlm.CancArgs
	if err := a.Decode(d); err != nil {
		return nil, garbage(err)
	}
	res := &nlm.Res{Cookie: a.Cookie}
	q, st := m.request(req, &a.Lock, a.Exclusive)
	if st != nlm.Granted {
		res.Stat = st
		return res, nil
	}
	res.Stat = m.Cancel(&q)
	return res, nil
}

func (m *Manager) unlock(req *sunrpc.Request, d *xdr.Decoder) (nlm.Message, error) {
	var a nlm.UnlockArgs
	if err := a.Decode(d); err != nil {
		return nil, garbage(err)
	}
	res := &nlm.Res{Cookie: a.Cookie}
	q, st := m.request(req, &a.Lock, false)
	if st != nlm.Granted {
		res.Stat = st
		return res, nil
	}
	res.Stat = m.Unlock(&q)
	return res, nil
}

// grantedRes is GRANTED_RES: a client's asynchronous answer to GRANTED.
func (m *Manager) grantedRes(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
	var a nlm.Res
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return garbage(err)
	}
	if !m.GrantedRes(a.Cookie, a.Stat) {
		m.log.Info("lockd: GRANTED_RES with an unknown cookie ignored", "peer", req.Peer)
	}
	return nil
}

// nsmNotify is NSM_NOTIFY, which only a status monitor on this host may
// send: from a loopback address and a privileged port (below 1024), as
// Linux lockd's nlm_privileged_requester; SYSTEM_ERR otherwise.
func (m *Manager) nsmNotify(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
	var a nlm.SMStatus
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return garbage(err)
	}
	var ap netip.AddrPort
	err := sunrpc.ErrSystemErr
	if req.Peer != nil {
		ap, err = netip.ParseAddrPort(req.Peer.String())
	}
	if err != nil || !ap.Addr().Unmap().IsLoopback() || ap.Port() >= 1024 {
		return fmt.Errorf("%w: NSM_NOTIFY from %v", sunrpc.ErrSystemErr, req.Peer)
	}
	n := 0
	for _, c := range m.nsm.match(a.MonName, "") {
		n += m.FreeAll(c)
	}
	n += m.FreeAll(a.MonName)
	m.log.Info("lockd: NSM_NOTIFY: client rebooted, locks freed", "client", a.MonName, "locks", n)
	return nil
}

// freeAll is FREE_ALL: every lock of the client named.
func (m *Manager) freeAll(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
	var a nlm.NotifyArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return garbage(err)
	}
	n := m.FreeAll(a.Name)
	m.log.Info("lockd: FREE_ALL", "client", a.Name, "locks", n, "peer", req.Peer)
	return nil
}
