package client

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/statmon"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// CallbackRPCBind is the rpcbind the callback service registers with:
// the local host's (RFC 1833), where servers look for a client's NLM and
// NSM services.
var CallbackRPCBind = lockcb.DefaultRPCBind

// ownerTag ends the oh of this process's lock owners ("svid@host/TAG"):
// the process id, which tells the node's callback service whose lock a
// GRANTED names.
var ownerTag = strconv.Itoa(os.Getpid())

// UseNodeCallbacks makes this process take its callbacks from the node's
// lock callback service at socket (package lockcb; the mounter runs it)
// instead of serving its own: the process attaches there when its first
// Locker connects. Call it before any Locker connects; "" keeps the
// process's own service.
func UseNodeCallbacks(socket string) {
	callbacks.mu.Lock()
	defer callbacks.mu.Unlock()
	callbacks.node = socket
}

// callbackService is this process's NLM and NSM service for the calls
// servers make to their clients: NLM GRANTED (a blocked lock is now
// held; X/Open XNFS chapter 10) and NSM SM_NOTIFY (a server rebooted;
// chapter 11). One TCP listener on every address of the host serves both
// programs for every Locker of the process; it is registered with the
// local rpcbind when that answers and the programs are free there. With
// a node service (UseNodeCallbacks) the process attaches to that instead,
// which passes it the callbacks for its locks and servers. It runs while
// at least one Locker has connected.
type callbackService struct {
	mu      sync.Mutex
	lockers map[*Locker]struct{}
	l       net.Listener
	cancel  context.CancelFunc
	done    chan struct{}
	regs    [][2]uint32 // (prog, vers) registered with rpcbind by us
	node    string      // the node service's socket, or ""
	att     *lockcb.Attachment
}

var callbacks callbackService

// CallbackPort returns the TCP port of this process's callback service,
// 0 when it is not running.
func CallbackPort() int {
	callbacks.mu.Lock()
	defer callbacks.mu.Unlock()
	if callbacks.l == nil {
		return 0
	}
	return callbacks.l.Addr().(*net.TCPAddr).Port
}

func (s *callbackService) add(l *Locker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lockers == nil {
		s.lockers = map[*Locker]struct{}{}
	}
	s.lockers[l] = struct{}{}
	switch {
	case s.node != "" && s.att == nil:
		s.att = lockcb.Attach(s.node, ownerTag, s.relayed)
	case s.node == "" && s.l == nil:
		if err := s.startLocked(); err != nil {
			klog.ErrorS(err, "NLM callback service not started: blocked locks complete by polling, server reboots are seen by its grace period")
		}
	}
	if s.att != nil {
		s.att.SetServers(s.serversLocked())
	}
}

// serversLocked returns the names and addresses of the Lockers' servers.
func (s *callbackService) serversLocked() []string {
	seen := map[string]bool{}
	var out []string
	for l := range s.lockers {
		l.mu.Lock()
		names := []string{l.srv.Server}
		if l.serverIP != nil {
			names = append(names, l.serverIP.String())
		}
		l.mu.Unlock()
		for _, n := range names {
			if n != "" && !seen[n] && len(out) < lockcb.MaxServers {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// relayed runs a callback the node's service passed on (lockcb.Handler).
func (s *callbackService) relayed(m lockcb.Message) uint32 {
	var peer net.Addr
	if ap, err := netip.ParseAddrPort(m.Peer); err == nil {
		peer = net.TCPAddrFromAddrPort(ap)
	}
	d := xdr.NewDecoder(m.Args)
	switch {
	case m.Prog == nlm.Program && m.Proc == nlm.ProcGranted:
		var a nlm.TestArgs
		if a.Decode(d) != nil {
			return uint32(nlm.Failed)
		}
		return uint32(s.granted(&a, peer))
	case m.Prog == nlm.Program && m.Proc == nlm.ProcGrantedMsg:
		var a nlm.TestArgs
		if a.Decode(d) != nil {
			return uint32(nlm.Failed)
		}
		return uint32(s.grantedMsg(&a, peer))
	case m.Prog == nsm.Program && m.Proc == nsm.ProcNotify:
		var a nsm.StatChge
		if a.Decode(d) == nil {
			s.notify(&a, peer)
		}
	}
	return 0
}

func (s *callbackService) remove(l *Locker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.lockers, l)
	if len(s.lockers) == 0 && s.att != nil {
		s.att.Close()
		s.att = nil
	}
	if len(s.lockers) == 0 && s.l != nil {
		s.stopLocked()
	}
}

func (s *callbackService) startLocked() error {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return err
	}
	srv := sunrpc.NewServer(nil)
	granted := func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nlm.Res{Cookie: a.Cookie, Stat: s.granted(&a, req.Peer)}
		r.Encode(&res.Encoder)
		return nil
	}
	grantedMsg := func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		_ = s.grantedMsg(&a, req.Peer)
		return nil // void: the answer is the GRANTED_RES call
	}
	nlmProcs := make([]sunrpc.Handler, nlm.ProcGrantedMsg+1)
	nlmProcs[nlm.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	nlmProcs[nlm.ProcGranted] = granted
	nlmProcs[nlm.ProcGrantedMsg] = grantedMsg
	srv.Register(nlm.Program, nlm.Version, nlmProcs)
	// the host's status monitor while this process holds NSM in rpcbind
	// (no rpc.statd, no node service): a lock server of this host (an
	// NFS-Ganesha NLM) calls it for its clients
	mon := &statmon.Monitor{RPCBind: CallbackRPCBind, State: hostStateNow}
	srv.Register(nsm.Program, nsm.Version, mon.Handlers(func(_ context.Context, req *sunrpc.Request, a *nsm.StatChge) {
		s.notify(a, req.Peer)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sunrpc.ServeTCP(ctx, ln, srv, sunrpc.TCPOptions{})
	}()
	s.l, s.cancel, s.done = ln, cancel, done
	port := ln.Addr().(*net.TCPAddr).Port
	s.regs = nil
	for _, pv := range [][2]uint32{{nlm.Program, nlm.Version}, {nsm.Program, nsm.Version}} {
		if lockcb.Register(CallbackRPCBind, pv[0], pv[1], port) {
			s.regs = append(s.regs, pv)
		}
	}
	klog.InfoS("NLM/NSM callback service started", "port", port, "registered", len(s.regs))
	return nil
}

// garbage is the error of arguments that do not decode: GARBAGE_ARGS.
func garbage(err error) error { return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err) }

// stopLocked stops the service and removes its registrations (those
// another service made meanwhile are left alone: lockcb.Unregister).
func (s *callbackService) stopLocked() {
	port := s.l.Addr().(*net.TCPAddr).Port
	for _, pv := range s.regs {
		lockcb.Unregister(CallbackRPCBind, pv[0], pv[1], port)
	}
	s.regs = nil
	s.cancel()
	<-s.done
	s.l = nil
}

// granted hands a GRANTED callback to the Locker waiting for it:
// NLM4_GRANTED when one was, NLM4_DENIED when none was (the server then
// releases the lock, as Linux's lockd asks by the same answer).
func (s *callbackService) granted(a *nlm.TestArgs, peer net.Addr) nlm.Stat {
	s.mu.Lock()
	ls := make([]*Locker, 0, len(s.lockers))
	for l := range s.lockers {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		if l.fromServer(peer) && l.granted(a) {
			return nlm.Granted
		}
	}
	// from another address than the server's (a Service address translated to
	// the server pod's, NAT): the waiter confirms with the server by LOCK at once
	for _, l := range ls {
		if !l.fromServer(peer) && l.wake(a, peer) {
			return nlm.Granted
		}
	}
	klog.V(2).InfoS("NLM GRANTED for no waiting lock", "peer", peer, "svid", a.Lock.Svid)
	return nlm.Denied
}

// grantedMsg handles GRANTED_MSG, the message form of GRANTED that
// Linux's lockd sends (nlmsvc_grant_blocked; X/Open XNFS section 14.3):
// it completes the waiting LOCK the callback names, as granted does, and
// answers with a GRANTED_RES call carrying the callback's cookie and
// NLM4_GRANTED, or NLM4_DENIED when no LOCK was waiting (the server then
// releases the lock). The GRANTED_RES goes to the server's NLM service
// through the NLM client of the Locker concerned (the server's lockd
// would otherwise look the client up at the caller's address, which
// through a NAT or port forward is not where its NLM service answers).
func (s *callbackService) grantedMsg(a *nlm.TestArgs, peer net.Addr) nlm.Stat {
	s.mu.Lock()
	ls := make([]*Locker, 0, len(s.lockers))
	for l := range s.lockers {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var to *Locker
	st := nlm.Denied
	for _, l := range ls {
		if !l.fromServer(peer) {
			continue
		}
		if l.granted(a) {
			to, st = l, nlm.Granted
			break
		}
		if to == nil {
			to = l
		}
	}
	if st != nlm.Granted {
		// from another address than the server's: confirmed by LOCK (see granted)
		for _, l := range ls {
			if !l.fromServer(peer) && l.wake(a, peer) {
				to, st = l, nlm.Granted
				break
			}
		}
	}
	if st != nlm.Granted {
		klog.V(2).InfoS("NLM GRANTED_MSG for no waiting lock", "peer", peer, "svid", a.Lock.Svid)
	}
	if to == nil {
		return st
	}
	res := nlm.Res{Cookie: append([]byte(nil), a.Cookie...), Stat: st}
	go to.grantedRes(&res)
	return st
}

// grantedRes sends GRANTED_RES (the answer to a GRANTED_MSG, XNFS
// section 14.3) to the server's NLM service, bounded by 10 s; a failure
// is logged: the server then sends GRANTED_MSG again.
func (l *Locker) grantedRes(res *nlm.Res) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rpc, err := l.client(ctx)
	if err == nil {
		err = rpc.Call(ctx, sunrpc.CallSpec{
			Prog: nlm.Program, Vers: nlm.Version, Proc: nlm.ProcGrantedRes,
			Args:         func(b *sunrpc.Builder) { res.Encode(&b.Encoder) },
			MaxReplySize: replyHeaderMax,
		})
	}
	if err != nil {
		klog.ErrorS(err, "NLM: GRANTED_RES not sent", "server", l.srv.Server, "stat", res.Stat)
	}
}

// notify starts a reclaim in every Locker whose server is the sender or
// named mon_name of an SM_NOTIFY.
func (s *callbackService) notify(a *nsm.StatChge, peer net.Addr) {
	s.mu.Lock()
	ls := make([]*Locker, 0, len(s.lockers))
	for l := range s.lockers {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	klog.InfoS("NSM SM_NOTIFY: server rebooted", "mon_name", a.MonName, "state", a.State, "peer", peer)
	for _, l := range ls {
		if l.srv.Server == a.MonName || l.fromServer(peer) {
			l.serverRestarted("SM_NOTIFY from " + a.MonName)
		}
	}
}

// fromServer reports whether peer is at the Locker's server's address
// (true when either is unknown).
func (l *Locker) fromServer(peer net.Addr) bool {
	l.mu.Lock()
	ip := l.serverIP
	l.mu.Unlock()
	ta, ok := peer.(*net.TCPAddr)
	if ip == nil || !ok {
		return true
	}
	return ta.IP.Equal(ip) || (ta.IP.IsLoopback() && ip.IsLoopback())
}
