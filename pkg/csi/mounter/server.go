package mounter

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/unixsock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DefaultReadyTimeout bounds how long a mount process may take to mount
// the NFS export and answer FUSE INIT.
const DefaultReadyTimeout = 2 * time.Minute

// requestTimeout bounds how long a connection may take to send its
// request once accepted.
const requestTimeout = 30 * time.Second

// maxFDs is the number of fds a request may carry that are received (and
// closed); a request with more is refused.
const maxFDs = 4

// Server is the mounter: it serves Requests on a unix socket and runs one
// `driver mount` process per mount.
type Server struct {
	// Socket is the path of the unix socket to listen on (a stale file
	// there is removed).
	Socket string
	// StateDir holds one JSON file and one log file per mount, so that a
	// restarted mounter re-adopts the processes still serving.
	StateDir string
	// Exe is the driver binary to run (default: this executable).
	Exe string
	// ExtraArgs are prepended to the mount command's flags (e.g. "-v=4").
	ExtraArgs []string
	// ReadyTimeout bounds one mount (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// LockSocket, if not "", is the unix socket of the node's lock
	// callback service (callbacks.go), which the mounter runs and its
	// mount processes attach to; "": each mount process serves its own.
	LockSocket string
	// RPCBind is the node's rpcbind the callback service registers with
	// ("": 127.0.0.1:111).
	RPCBind string
	// TLSCA, TLSCert and TLSKey are the node's RPC-with-TLS files, given
	// to the mount processes whose options ask for it (xprtsec=tls: the
	// CA; xprtsec=mtls: all three) as --tls-ca, --tls-cert and --tls-key
	// ("": not given). Cert and Key may be one file holding both
	// (nodecert.Requester's).
	TLSCA, TLSCert, TLSKey string
	// TakeOver makes Run hand every mount recorded in StateDir whose
	// process still listens on its handover socket to a new process of
	// Exe (driver mount --takeover): the upgrade of a node's mounts to
	// this mounter's binary, which the applications see as a pause.
	TakeOver bool
	// Keeper, if not "", is the socket of the node's Keeper (the node
	// plugin), which holds a duplicate of every mount's connection: at
	// start, the mounts recorded in StateDir whose processes died with a
	// previous mounter's container are taken up again on the keeper's
	// duplicates (driver mount --recover), and a mount given up is
	// forgotten there.
	Keeper string

	mu        sync.Mutex
	stopped   bool // Run returned: the processes' ends are left to the next mounter
	callbacks *lockcb.Service
	mounts    map[string]*proc    // by target
	starting  map[string]struct{} // targets with a mount in progress
}

// proc is one serving process.
type proc struct {
	m    Mount
	done chan struct{} // closed when the process has exited and is forgotten
	// exited is closed as soon as the process's exit is seen (processes
	// this mounter started; nil for adopted ones)
	exited chan struct{}
	// fuse is this mounter's duplicate of the mount's /dev/fuse
	// descriptor: the connection outlives the process, and a process
	// started with --recover takes it up after a crash (for an adopted
	// process, taken from it: nil when that fails).
	fuse *os.File
	// released: the node plugin unmounted the target (OpRelease); the
	// process's end is not a crash.
	released bool
}

// Run listens on s.Socket and serves until ctx ends. Processes already
// serving are left running when it returns: they end when their mount
// point is unmounted.
func (s *Server) Run(ctx context.Context) error {
	if s.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("mounter: %w", err)
		}
		s.Exe = exe
	}
	if s.ReadyTimeout == 0 {
		s.ReadyTimeout = DefaultReadyTimeout
	}
	defer func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
	}()
	if err := os.MkdirAll(s.StateDir, 0o700); err != nil {
		return fmt.Errorf("mounter: state dir: %w", err)
	}
	s.mu.Lock()
	s.mounts = map[string]*proc{}
	s.starting = map[string]struct{}{}
	s.stopped = false
	orphans := s.adopt()
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.Socket), 0o755); err != nil {
		return fmt.Errorf("mounter: %w", err)
	}
	if s.LockSocket != "" {
		// before the first mount and the takeovers (adopted processes
		// attach again by themselves): a mount process attaches when it
		// starts, and is given the socket only if the service runs
		ready := make(chan struct{})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			s.runCallbacks(cctx, ready)
		}()
		<-ready
	}
	for _, m := range orphans {
		s.recoverOrphan(ctx, m)
	}
	if s.TakeOver {
		s.takeOverAll(ctx)
	}
	// a predecessor that still runs (a rolling update's old pod) keeps
	// its connections but leaves the path alone when it exits
	l, err := unixsock.Listen("unixpacket", s.Socket, 0o600)
	if err != nil {
		return fmt.Errorf("mounter: %w", err)
	}
	klog.InfoS("mounter: listening", "socket", s.Socket, "stateDir", s.StateDir, "adopted", len(s.List()))
	return serveListener(ctx, l, "mounter", s.handle)
}

// serveListener answers each connection of l with h (serveRequest) until
// ctx ends, and then closes l; errors name who.
func serveListener(ctx context.Context, l *unixsock.Listener, who string, h handler) error {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: accept: %w", who, err)
		}
		go serveRequest(ctx, c, h)
	}
}

// List returns the mounts being served, sorted by target.
func (s *Server) List() []Mount {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Mount, 0, len(s.mounts))
	for _, p := range s.mounts {
		out = append(out, p.m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

// handler answers one request, with the fds it carried; a non-nil file
// it returns is sent with the response (SCM_RIGHTS) and then closed.
type handler func(ctx context.Context, req Request, files []*os.File) (Response, *os.File)

// serveRequest reads the one request of c, answers it with h and closes
// c. The request's fds are closed once it is answered. Its context ends
// when the client of an OpMount closes its end.
func serveRequest(ctx context.Context, c *net.UnixConn, h handler) {
	defer c.Close()
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	var files []*os.File
	if oobn > 0 {
		// received with MSG_CMSG_CLOEXEC (package net): not inherited by
		// the mount processes of concurrent requests
		files = receivedFiles(oob[:oobn])
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		if errors.Is(err, io.EOF) {
			klog.V(4).InfoS("mounter: connection closed without a request")
		} else {
			klog.ErrorS(err, "mounter: read request")
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var req Request
	var resp Response
	var out *os.File
	switch {
	case n > MaxMessage || flags&unix.MSG_TRUNC != 0:
		resp.Error = fmt.Sprintf("bad request: exceeds %d bytes", MaxMessage)
	case flags&unix.MSG_CTRUNC != 0:
		resp.Error = fmt.Sprintf("bad request: more than %d fds", maxFDs)
	default:
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			resp.Error = fmt.Sprintf("bad request: %v", err)
			break
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if req.Op == OpMount {
			// the client never writes again: a read returns when it
			// closes its end (gave up) or when this function does
			go func() {
				var b [1]byte
				_, _ = c.Read(b[:])
				cancel()
			}()
		}
		resp, out = h(rctx, req, files)
	}
	if out != nil {
		defer out.Close()
	}
	if err := writeResponse(c, resp, out); errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		klog.V(2).InfoS("mounter: client gone before the answer", "op", req.Op, "target", req.Mount.Target, "error", resp.Error)
	} else if err != nil {
		klog.ErrorS(err, "mounter: write response", "op", req.Op, "target", req.Mount.Target)
	}
}

// receivedFiles returns the fds carried in the control messages oob as
// files.
func receivedFiles(oob []byte) []*os.File {
	var files []*os.File
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			for _, fd := range r {
				files = append(files, os.NewFile(uintptr(fd), "fuse"))
			}
		}
	}
	return files
}

// writeResponse sends resp as one message, with f's descriptor when f is
// not nil, or, when it is longer than MaxMessage, its mounts split over
// several messages.
func writeResponse(c *net.UnixConn, resp Response, f *os.File) error {
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	if len(b) <= MaxMessage {
		var oob []byte
		if f != nil {
			oob = unix.UnixRights(int(f.Fd()))
		}
		_, _, err = c.WriteMsgUnix(b, oob, nil)
		return err
	}
	if resp.Error != "" || len(resp.Mounts) < 2 {
		b, _ = json.Marshal(Response{Error: fmt.Sprintf("response of %d bytes exceeds %d", len(b), MaxMessage)})
		_, err = c.Write(b)
		return err
	}
	half := len(resp.Mounts) / 2
	if err := writeResponse(c, Response{Mounts: resp.Mounts[:half]}, nil); err != nil {
		return err
	}
	return writeResponse(c, Response{Mounts: resp.Mounts[half:]}, nil)
}

func (s *Server) handle(ctx context.Context, req Request, files []*os.File) (Response, *os.File) {
	switch req.Op {
	case OpMount:
		if len(files) != 1 {
			return Response{Error: fmt.Sprintf("mount: want exactly 1 fd, got %d", len(files))}, nil
		}
		m, err := s.start(ctx, req.Mount, files[0])
		if err != nil {
			return Response{Error: err.Error()}, nil
		}
		return Response{Mounts: []Mount{m}}, nil
	case OpList:
		return Response{Mounts: s.List()}, nil
	case OpRelease:
		t := time.Duration(req.TimeoutMillis) * time.Millisecond
		if t <= 0 {
			t = 10 * time.Second
		}
		s.release(req.Mount.Target, t)
		return Response{}, nil
	case OpDuplicate:
		f, err := s.duplicate(req.Mount.Target)
		if err != nil {
			return Response{Error: err.Error()}, nil
		}
		return Response{}, f
	default:
		return Response{Error: fmt.Sprintf("unknown op %q", req.Op)}, nil
	}
}

func key(target string) string {
	h := sha256.Sum256([]byte(target))
	return hex.EncodeToString(h[:12])
}

func (s *Server) statePath(target string) string {
	return filepath.Join(s.StateDir, key(target)+".json")
}

// start runs `driver mount` on the inherited fuse fd and waits for its
// ready line.
func (s *Server) start(ctx context.Context, m Mount, fuse *os.File) (Mount, error) {
	return s.launch(ctx, m, fuse, modeMount)
}

// launch runs `driver mount` for m: mounting on fuse (modeMount), taking
// the connection fuse up after a crash (modeRecover), or taking the
// mount over from the process listening on m.HandoverSocket
// (modeTakeOver, fuse nil), and waits for its ready line.
func (s *Server) launch(ctx context.Context, m Mount, fuse *os.File, mode launchMode) (Mount, error) {
	if !filepath.IsAbs(m.Target) || m.Source == "" {
		return Mount{}, errors.New("mount: target must be absolute and source set")
	}
	m.Target = filepath.Clean(m.Target)
	// settled is closed when this launch has returned, after the target
	// is no longer starting: the exit of the process it started waits for
	// it, so that a process that dies just after its ready line is
	// either this launch's failure or a crash recovered after it, never
	// both (a recovery refused as "in progress", the dead process then
	// recorded as serving)
	settled := make(chan struct{})
	defer close(settled)
	s.mu.Lock()
	if _, ok := s.starting[m.Target]; ok {
		s.mu.Unlock()
		return Mount{}, fmt.Errorf("mount: a mount of %s is already in progress", m.Target)
	}
	s.starting[m.Target] = struct{}{}
	p := s.mounts[m.Target]
	prev := p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.starting, m.Target)
		s.mu.Unlock()
	}()
	if p != nil && mode == modeMount {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			return Mount{}, fmt.Errorf("mount: %s is still served by pid %d", m.Target, p.m.PID)
		}
	}

	rr, rw, err := os.Pipe()
	if err != nil {
		return Mount{}, err
	}
	defer rr.Close()
	m.Log = filepath.Join(s.StateDir, key(m.Target)+".log")
	logf, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		rw.Close()
		return Mount{}, err
	}
	args := append([]string{"mount"}, s.ExtraArgs...)
	// the sockets are the process's own (its predecessor in a handover
	// still serves on its own until it exits)
	old := m.HandoverSocket
	run := key(m.Target) + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
	m.MetricsSocket = filepath.Join(s.StateDir, run+".metrics.sock")
	if mode != modeTakeOver {
		args = append(args, "--fuse-fd=3")
	}
	args = append(args, "--ready-fd=4", "--metrics-socket="+m.MetricsSocket)
	// where a successor takes the mount over, and the state map a
	// process taking it up after a crash reads
	m.MapFile = filepath.Join(s.StateDir, key(m.Target)+".map")
	m.HandoverSocket = filepath.Join(s.StateDir, run+".handover.sock")
	args = append(args, "--handover-socket="+m.HandoverSocket, "--map-file="+m.MapFile)
	switch mode {
	case modeRecover:
		args = append(args, "--recover")
	case modeTakeOver:
		args = append(args, "--takeover="+old)
		if fuse == nil {
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				rw.Close()
				return Mount{}, err
			}
			defer devnull.Close()
			fuse = devnull // fd 3: the connection comes over the handover socket
		}
	}
	if m.Options != "" {
		args = append(args, "-o", m.Options)
	}
	if m.MachineName != "" {
		args = append(args, "--machine-name", m.MachineName)
	}
	if m.LockCallerName != "" {
		args = append(args, "--lock-caller-name="+m.LockCallerName)
	}
	args = append(args, s.tlsArgs(m.Options)...)
	// the node's NSM state, shared by its mounts (client.HostState)
	args = append(args, "--state-dir="+filepath.Join(s.StateDir, "nsm"))
	s.mu.Lock()
	if s.callbacks != nil {
		args = append(args, "--node-lock-socket="+s.LockSocket)
	}
	s.mu.Unlock()
	args = append(args, m.Source, m.Target)
	cmd := exec.Command(s.Exe, args...)
	cmd.ExtraFiles = []*os.File{fuse, rw}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the mounter's process group (Ctrl-C,
	// a restart of the mounter outside a container) does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	rw.Close()
	logf.Close()
	if err != nil {
		return Mount{}, fmt.Errorf("mount: start %s: %w", s.Exe, err)
	}
	m.PID, m.Started = cmd.Process.Pid, time.Now()
	p = &proc{m: m, done: make(chan struct{}), exited: make(chan struct{})}
	if mode != modeTakeOver {
		p.fuse = dupFile(fuse)
	}
	s.mu.Lock()
	s.mounts[m.Target] = p
	if mode == modeTakeOver {
		// recorded before the process can take the mount: its
		// predecessor exits once it has, and that process's mounter
		// (the old pod's) must then find the mount recorded as
		// another process's, and leave its files alone (forget)
		s.writeState(m)
	}
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		klog.InfoS("mounter: mount process exited", "target", m.Target, "pid", m.PID, "err", err)
		close(p.exited)
		<-settled
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			// the next mounter (adopt) recovers or forgets the mount;
			// its files may be a successor's already
			if p.fuse != nil {
				p.fuse.Close()
			}
			close(p.done)
			return
		}
		if crashed(err) {
			if s.recover(p) {
				return
			}
			s.mu.Lock()
			released := p.released
			s.mu.Unlock()
			if !released {
				s.forgetKept(m.Target) // given up: its callers get ENOTCONN
			}
		}
		if p.fuse != nil {
			p.fuse.Close()
		}
		if err == nil && !s.superseded(p) {
			// a clean end (unmounted): its log has nothing left to tell;
			// a failed or killed one keeps its log for troubleshooting,
			// and one that handed the mount over leaves it to its
			// successor, which writes on in it
			_ = os.Remove(m.Log)
		}
		s.forget(p)
	}()

	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(rr).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	timer := time.NewTimer(s.ReadyTimeout)
	defer timer.Stop()
	var res string
	select {
	case res = <-line:
	case <-timer.C:
		res = "error: not mounted within " + s.ReadyTimeout.String()
	case <-ctx.Done():
		res = "error: " + ctx.Err().Error()
	}
	if res != "ok" {
		s.mu.Lock()
		p.released = true // no recovery of a process that never served
		s.mu.Unlock()
		_ = cmd.Process.Kill()
		<-p.exited // its exit is handled once this launch returned
		s.unlistFailed(m.Target, p, prev, mode)
		msg := strings.TrimPrefix(res, "error: ")
		if msg == "" {
			msg = "exited before mounting: " + tail(m.Log)
		}
		return Mount{}, fmt.Errorf("%w: %s", ErrMount, msg)
	}
	select {
	case <-p.exited:
		if mode != modeRecover {
			// exited right away: a failed launch, not recovered
			s.mu.Lock()
			p.released = true
			s.mu.Unlock()
			s.unlistFailed(m.Target, p, prev, mode)
			return Mount{}, fmt.Errorf("%w: exited after mounting: %s", ErrMount, tail(m.Log))
		}
		// a process that took the connection up and crashed at once:
		// it served, and its exit (after this launch) is a crash to
		// recover again, within maxRecoveries
	default:
	}
	if mode == modeTakeOver {
		// this mounter's own duplicate of the connection, for --recover
		f, err := fuseOf(m.PID)
		if err != nil {
			klog.ErrorS(err, "mounter: no duplicate of the taken-over connection: a crash of its process ends the mount", "target", m.Target, "pid", m.PID)
		}
		s.mu.Lock()
		p.fuse = f
		s.mu.Unlock()
	}
	s.writeState(m)
	klog.InfoS("mounter: serving", "target", m.Target, "source", m.Source, "pid", m.PID, "volume", m.VolumeID, "pod", m.PodUID)
	return m, nil
}

// unlistFailed takes p, the process of a launch that failed, off the
// mounts at once (its exit is handled after the launch returned), and
// lists prev again when it was a takeover's predecessor, which serves on.
func (s *Server) unlistFailed(target string, p, prev *proc, mode launchMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.mounts[target]
	if ok && cur == p {
		delete(s.mounts, target)
		ok = false
	}
	if !ok && prev != nil && mode == modeTakeOver {
		s.mounts[target] = prev
		s.writeState(prev.m)
	}
}

// forget drops p once its process has exited. Its state file is removed
// unless it records another process (superseded).
func (s *Server) forget(p *proc) {
	s.mu.Lock()
	if s.mounts[p.m.Target] == p {
		delete(s.mounts, p.m.Target)
		if !s.superseded(p) {
			_ = os.Remove(s.statePath(p.m.Target))
		}
	}
	if p.m.MetricsSocket != "" {
		_ = os.Remove(p.m.MetricsSocket)
	}
	s.mu.Unlock()
	close(p.done)
}

// superseded reports whether the state file of p's mount records another
// process: a successor (another mounter's, in a rolling update) took the
// mount over, and the state file and the log are its own now.
func (s *Server) superseded(p *proc) bool {
	b, err := os.ReadFile(s.statePath(p.m.Target))
	if err != nil {
		return false
	}
	var m Mount
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	return m.PID != p.m.PID
}

// release waits for the process serving target to exit, then SIGTERM,
// then SIGKILL.
func (s *Server) release(target string, timeout time.Duration) {
	s.mu.Lock()
	p := s.mounts[filepath.Clean(target)]
	s.mu.Unlock()
	if p == nil {
		return
	}
	s.mu.Lock()
	p.released = true
	s.mu.Unlock()
	select {
	case <-p.done:
		return
	case <-time.After(timeout):
	}
	klog.InfoS("mounter: mount process did not exit after unmount; terminating", "target", target, "pid", p.m.PID)
	_ = unix.Kill(p.m.PID, unix.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = unix.Kill(p.m.PID, unix.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	}
}

// adopt re-attaches the processes of a previous mounter run that still
// serve their mount, and drops the state of those that exited, but for
// those whose connections the keeper may hold: it returns them, to be
// taken up again (recoverOrphan). s.mu is held.
func (s *Server) adopt() (orphans []Mount) {
	ents, err := os.ReadDir(s.StateDir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(s.StateDir, e.Name())
		b, err := os.ReadFile(path)
		var m Mount
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err == nil && s.Keeper != "" && m.MapFile != "" && !alive(m) && !listening(m) {
			// its process died with the previous mounter's container:
			// the keeper may hold its connection
			orphans = append(orphans, m)
			continue
		}
		if err != nil || !(alive(m) || s.TakeOver && listening(m)) {
			klog.InfoS("mounter: dropping the state of a mount no longer served", "file", path, "target", m.Target, "pid", m.PID)
			_ = os.Remove(path)
			continue
		}
		p := &proc{m: m, done: make(chan struct{})}
		if f, err := fuseOf(m.PID); err == nil {
			// for --recover should the adopted process crash
			p.fuse = f
		}
		s.mounts[m.Target] = p
		go func() {
			for alive(p.m) || listening(p.m) {
				time.Sleep(time.Second)
			}
			klog.InfoS("mounter: adopted mount process exited", "target", p.m.Target, "pid", p.m.PID)
			if p.fuse != nil {
				p.fuse.Close()
			}
			s.mu.Lock()
			orphan := s.mounts[p.m.Target] == p && !p.released && !s.stopped && !s.superseded(p)
			s.mu.Unlock()
			if orphan && s.Keeper != "" && p.m.MapFile != "" {
				// no exit status to tell a crash from an unmount: the
				// keeper holds the connection of a mount still mounted
				// only (the node plugin lets it go at unmount)
				s.recoverOrphan(context.Background(), p.m)
			}
			s.forget(p)
		}()
		klog.InfoS("mounter: adopted", "target", m.Target, "pid", m.PID)
	}
	return orphans
}

// alive reports whether m's process still runs and is a mount of m.Target.
func alive(m Mount) bool {
	if m.PID <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.PID) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) == 0 || args[len(args)-1] != m.Target {
		return false
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(m.PID) + "/stat")
	if err != nil {
		return false
	}
	// a zombie (state Z) has exited
	if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
		return false
	}
	return true
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// tlsArgs returns the RPC-with-TLS flags of a mount with options opts:
// none when opts ask for no TLS (or do not parse: the mount process
// reports that).
func (s *Server) tlsArgs(opts string) []string {
	o, err := mountopts.Parse(opts)
	if err != nil {
		return nil
	}
	var args []string
	switch o.XprtSec {
	case mountopts.XprtSecMTLS:
		if s.TLSCert != "" {
			args = append(args, "--tls-cert="+s.TLSCert)
		}
		if s.TLSKey != "" {
			args = append(args, "--tls-key="+s.TLSKey)
		}
		fallthrough
	case mountopts.XprtSecTLS:
		if s.TLSCA != "" {
			args = append(args, "--tls-ca="+s.TLSCA)
		}
	}
	return args
}
