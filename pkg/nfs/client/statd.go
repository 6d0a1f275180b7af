package client

import (
	"context"
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// monitors is the part of the callback service's NSM that a lock
// server on this host needs from its host's NSM when this process holds
// the host's NSM registration (there is no rpc.statd): SM_STAT, SM_MON,
// SM_UNMON and SM_UNMON_ALL from local callers answer stat_succ with this
// host's state and are remembered, and an SM_NOTIFY for a monitored host
// is passed on to the monitor's callback (my_id's program, version and
// procedure, found through the local rpcbind, with the SM_MON's private
// data), as rpc.statd does (X/Open XNFS chapter 11). Monitors are not
// kept across restarts of this process.
type monitors struct {
	mu  sync.Mutex
	mon map[nsm.MonID][nsm.PrivSize]byte
}

var statd = monitors{mon: map[nsm.MonID][nsm.PrivSize]byte{}}

// hostStateNow is the NSM state this process answers with: that of the
// first Locker with a HostState, else the in-memory one.
func hostStateNow() int32 {
	callbacks.mu.Lock()
	defer callbacks.mu.Unlock()
	for l := range callbacks.lockers {
		if l.opts.State != nil {
			return l.opts.State.State()
		}
	}
	return memState
}

func isLocal(peer net.Addr) bool {
	ta, ok := peer.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// nsmHandlers returns the NSM procedures of the callback service.
func (m *monitors) handlers(notify sunrpc.Handler) []sunrpc.Handler {
	h := make([]sunrpc.Handler, nsm.NumProcs)
	h[nsm.ProcStat] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.SMName
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatSucc, State: hostStateNow()}
		r.Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcMon] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.Mon
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatFail, State: hostStateNow()}
		if isLocal(req.Peer) {
			m.mu.Lock()
			m.mon[a.MonID] = a.Priv
			m.mu.Unlock()
			r.Res = nsm.StatSucc
		}
		r.Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcUnmon] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.MonID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		if isLocal(req.Peer) {
			m.mu.Lock()
			delete(m.mon, a)
			m.mu.Unlock()
		}
		(&nsm.Stat{State: hostStateNow()}).Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcUnmonAll] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.MyID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		if isLocal(req.Peer) {
			m.mu.Lock()
			for k := range m.mon {
				if k.MyID == a {
					delete(m.mon, k)
				}
			}
			m.mu.Unlock()
		}
		(&nsm.Stat{State: hostStateNow()}).Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcNotify] = notify
	return h
}

// forward passes an SM_NOTIFY on to the monitors of its host.
func (m *monitors) forward(a *nsm.StatChge) {
	type cb struct {
		id   nsm.MyID
		priv [nsm.PrivSize]byte
	}
	var cbs []cb
	m.mu.Lock()
	for k, priv := range m.mon {
		if k.MonName == a.MonName {
			cbs = append(cbs, cb{k.MyID, priv})
		}
	}
	m.mu.Unlock()
	for _, c := range cbs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			host, _, _ := net.SplitHostPort(CallbackRPCBind)
			port, err := GetPort(ctx, CallbackRPCBind, c.id.MyProg, c.id.MyVers, sunrpc.TCPOptions{})
			if err != nil {
				klog.ErrorS(err, "NSM: monitor's callback not found", "mon_name", a.MonName, "prog", c.id.MyProg)
				return
			}
			rc, err := sunrpc.NewClient(sunrpc.TCPDialer(hostPort(host, port), sunrpc.TCPOptions{}), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2}})
			if err != nil {
				return
			}
			defer rc.Close()
			st := smStatus{MonName: a.MonName, State: a.State, Priv: c.priv}
			if err := rc.Call(ctx, sunrpc.CallSpec{Prog: c.id.MyProg, Vers: c.id.MyVers, Proc: c.id.MyProc,
				Args: func(b *sunrpc.Builder) { st.encode(b) }}); err != nil {
				klog.ErrorS(err, "NSM: state change not passed on", "mon_name", a.MonName, "prog", c.id.MyProg)
			}
		}()
	}
}

// smStatus is the argument of a monitor's callback (Linux's
// nlm4svc_proc_sm_notify reads it as mon_name, state, priv).
type smStatus struct {
	MonName string
	State   int32
	Priv    [nsm.PrivSize]byte
}

func (s *smStatus) encode(b *sunrpc.Builder) {
	b.String(s.MonName)
	b.Int32(s.State)
	b.Fixed(s.Priv[:])
}
