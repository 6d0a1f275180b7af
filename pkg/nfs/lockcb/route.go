package lockcb

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// OwnerTag returns the tag of a lock owner handle of the form
// "svid@host/TAG" (what follows the last "/"), or "" when oh has none.
func OwnerTag(oh []byte) string {
	i := strings.LastIndexByte(string(oh), '/')
	if i < 0 || i == len(oh)-1 || len(oh)-i-1 > MaxTag {
		return ""
	}
	return string(oh[i+1:])
}

// route passes one callback to the process it concerns and returns its
// answer: for GRANTED and GRANTED_MSG the nlm4_stats of the process whose
// tag ends the lock's oh (NLM4_DENIED when no process has it); for
// SM_NOTIFY 0, once every process whose servers include the mon_name or
// the caller's address has answered. Errors: arguments that do not
// decode (wrapping sunrpc.ErrGarbageArgs), a procedure not relayed
// (sunrpc.ErrProcUnavail), a process that did not answer
// (ErrNotDelivered).
func (s *Service) route(ctx context.Context, prog, proc uint32, peer string, args []byte) (nlm.Stat, error) {
	ctx, cancel := context.WithTimeout(ctx, s.AnswerTimeout)
	defer cancel()
	call := Message{Kind: KindCall, Prog: prog, Proc: proc, Peer: peer, Args: args}
	switch {
	case prog == nlm.Program && (proc == nlm.ProcGranted || proc == nlm.ProcGrantedMsg):
		name := nlm.ProcName(proc)
		var a nlm.TestArgs
		if err := a.Decode(xdr.NewDecoder(args)); err != nil {
			return 0, fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err)
		}
		tag := OwnerTag(a.Lock.OH)
		s.mu.Lock()
		pc := s.byTag[tag]
		s.mu.Unlock()
		if tag == "" || pc == nil {
			s.count(name, ResultUnrouted)
			klog.V(2).InfoS("lock callback service: callback for no attached mount", "proc", name, "oh", string(a.Lock.OH), "peer", peer)
			return nlm.Denied, nil
		}
		st, err := pc.call(ctx, call)
		switch {
		case err != nil:
			s.count(name, ResultFailed)
			klog.InfoS("lock callback service: mount did not answer a callback", "proc", name, "tag", tag, "err", err)
			return 0, err
		case nlm.Stat(st) == nlm.Granted:
			s.count(name, ResultGranted)
		default:
			s.count(name, ResultDenied)
		}
		return nlm.Stat(st), nil
	case prog == nsm.Program && proc == nsm.ProcNotify:
		var a nsm.StatChge
		if err := a.Decode(xdr.NewDecoder(args)); err != nil {
			return 0, fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err)
		}
		host, _, err := net.SplitHostPort(peer)
		if err != nil {
			host = peer
		}
		var to []*peerConn
		s.mu.Lock()
		for pc := range s.conns {
			for _, sv := range pc.servers {
				if sv == a.MonName || sv == host {
					to = append(to, pc)
					break
				}
			}
		}
		s.mu.Unlock()
		klog.InfoS("lock callback service: SM_NOTIFY", "mon_name", a.MonName, "state", a.State, "peer", peer, "mounts", len(to))
		if len(to) == 0 {
			s.count("SM_NOTIFY", ResultUnrouted)
			return 0, nil
		}
		var wg sync.WaitGroup
		for _, pc := range to {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := pc.call(ctx, call); err != nil {
					s.count("SM_NOTIFY", ResultFailed)
					return
				}
				s.count("SM_NOTIFY", ResultDelivered)
			}()
		}
		wg.Wait()
		return 0, nil
	}
	return 0, fmt.Errorf("%w: program %d procedure %d", sunrpc.ErrProcUnavail, prog, proc)
}

// rpcServer returns the NLM v4 (NULL, GRANTED, GRANTED_MSG) and NSM v1
// procedures of the service: the node's status monitor (package statmon)
// whose SM_NOTIFY is also routed to the mounts.
func (s *Service) rpcServer() *sunrpc.Server {
	srv := sunrpc.NewServer(nil)
	nlmProcs := make([]sunrpc.Handler, nlm.ProcGrantedMsg+1)
	nlmProcs[nlm.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	nlmProcs[nlm.ProcGranted] = func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err)
		}
		st, err := s.route(ctx, req.Prog, req.Proc, req.Peer.String(), req.Args)
		if err != nil {
			// the server calls again; the mount's re-sent LOCK may
			// complete the wait first
			return fmt.Errorf("%w: %w", sunrpc.ErrSystemErr, err)
		}
		r := nlm.Res{Cookie: a.Cookie, Stat: st}
		r.Encode(&res.Encoder)
		return nil
	}
	nlmProcs[nlm.ProcGrantedMsg] = func(ctx context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		// void: the mount process answers with a GRANTED_RES call
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err)
		}
		s.routeLater(ctx, req)
		return nil
	}
	srv.Register(nlm.Program, nlm.Version, nlmProcs)
	srv.Register(nsm.Program, nsm.Version, s.Monitor().Handlers(func(ctx context.Context, req *sunrpc.Request, _ *nsm.StatChge) {
		s.routeLater(ctx, req)
	}))
	return srv
}

// routeLater routes the call req, whose arguments decoded, after its void
// reply (GRANTED_MSG, SM_NOTIFY).
func (s *Service) routeLater(ctx context.Context, req *sunrpc.Request) {
	args := append([]byte(nil), req.Args...)
	prog, proc, peer := req.Prog, req.Proc, req.Peer.String()
	go func() { _, _ = s.route(context.WithoutCancel(ctx), prog, proc, peer, args) }()
}
