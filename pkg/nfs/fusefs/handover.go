package fusefs

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Handover: a mount process hands its FUSE connection to a successor
// (another `driver mount`, usually a newer binary) so that the kernel,
// and the applications using the mount, see a pause and no error.
//
// The old process (Mount.Handover):
//  1. closes its gate (gate.go): requests that arrive now are held
//     unanswered; it waits for those in flight to end, blocked SETLKW
//     apart, and lock calls waiting out the NFS server's grace period
//     (gate.pause) apart: those are given up and asked again of the
//     successor, or carried (handoverUnlock: the unlocks of a RELEASE);
//  2. writes back and COMMITs every file's data (no byte is left only in
//     its memory);
//  3. freezes the gate (no answer leaves any more: a SETLKW granted now is
//     asked again by the successor) and reads go-fuse's table of the
//     kernel's nodeids (with lookup counts) and file handles
//     (gofusetable.go), each node's NFS file handle and stable
//     attributes, each open file's node and lock owners, each directory
//     handle's READDIRPLUS cookie, and the NLM owners (svid, oh) with
//     the ranges they hold (client.LockState);
//  4. sends its /dev/fuse descriptor (SCM_RIGHTS) and that state over a
//     unix socket, and waits for "ok"; then the process exits without
//     unmounting, unlocking or UMNT. On any failure it opens the gate and
//     goes on serving.
//
// The successor (Adopt) mounts the export with its own NFS client (the
// same root file handle, or it refuses), builds go-fuse's node tree with
// the same nodeids, lookup counts and file handles (restore), takes the
// lock owners over without a call to the server, replays the kernel's
// INIT to go-fuse (fuseuring.Server.Adopt: the kernel sends none),
// answers "ok", serves, and once the old process is gone (the socket's end) asks
// the kernel to send again what the old process read and never answered
// (FUSE_NOTIFY_RESEND, Linux 6.9): held requests, blocked SETLKWs. The
// kernel sends again the requests the successor is handling too; its
// fuseuring server answers those copies with their requests' replies
// (fuseuring.Server.Resend), so none is handled twice.
//
// Not carried: the RPC-over-RDMA connection and its credit grant (an
// RDMA queue pair lives in the process; the successor connects and is
// granted credits anew), the attribute, name and ACCESS caches (asked
// again), and FORGETs the kernel sent after the gate closed (their nodes
// stay known to the successor until unmount).

// ErrNoHandover says that this mount cannot be handed over: served over
// io_uring, a kernel without FUSE_NOTIFY_RESEND, or a go-fuse whose table
// this package cannot read.
var ErrNoHandover = errors.New("fusefs: this mount cannot be handed over")

// HandoverDrain bounds the wait for the requests in flight at a handover.
var HandoverDrain = 30 * time.Second

// handoverAckTimeout bounds the wait for the successor's answer.
const handoverAckTimeout = 2 * time.Minute

// HandoverStats says what one handover did.
type HandoverStats struct {
	// From and To are the versions of the old and the new binary.
	From, To string
	// Paused is how long the old process held requests: from closing its
	// gate to the successor's answer (old side), or from the state's
	// arrival to serving (new side); after a crash (Recover), from
	// Recover's call to serving, to which its caller may add its own
	// start (fusemount: from the start of the recovering process's Run).
	Paused time.Duration
	// Nodes, Files and Locks are the nodeids, file handles and held lock
	// ranges carried; Held the requests the old process held unanswered
	// (sent again by the kernel to the successor), or after a crash
	// those the kernel sent again (Resent: handled, joined or replayed).
	Nodes, Files, Locks int
	Held                int64
	// Resent says what became of the requests the kernel sent again
	// (Mount.Resent), once known.
	Resent fuseuring.ResendStats
}

// Resent waits until this process has read the requests the kernel sent
// again to it (FUSE_NOTIFY_RESEND) after Adopt or Recover, or ctx ends,
// and returns what became of them (fuseuring.Server.WaitResent). Errors:
// ErrNoHandover when the mount was not taken over from another process,
// fuseuring.ErrNoResend when the kernel sends nothing again (before
// Linux 6.9), ctx's.
func (m *Mount) Resent(ctx context.Context) (fuseuring.ResendStats, error) {
	if m.ring == nil || m.init == nil || m.devFD == nil {
		return fuseuring.ResendStats{}, ErrNoHandover
	}
	if !fuseuring.CanResend(m.init) {
		return fuseuring.ResendStats{}, fuseuring.ErrNoResend
	}
	return m.ring.WaitResent(ctx)
}

// handoverState is what the old process sends, JSON after the fd.
type handoverState struct {
	Version string
	Source  string
	RootFH  []byte
	Init    fuse.InitIn
	Nodes   []handoverNode
	Files   []handoverFile
	Owners  []client.LockOwnerState
	Held    []handoverLock
	// Unlocks are the unlocks of a RELEASE that waited out the server's
	// grace period: the successor makes them.
	Unlocks []handoverUnlock `json:",omitempty"`
	// Requests is how many requests the gate held when the state was
	// taken, and Closed when the gate closed (the successor's logs and
	// metrics: the pause applications see).
	Requests int64
	Closed   time.Time
}

type handoverNode struct {
	ID, Lookups uint64
	FH          []byte
	Ino, Gen    uint64
	Mode        uint32
	Parent      uint64 `json:",omitempty"`
	Name        string `json:",omitempty"`
	// SillyDir and SillyName: the file was unlinked while open and
	// renamed to SillyName in SillyDir (sillyrename.go).
	SillyDir  uint64 `json:",omitempty"`
	SillyName string `json:",omitempty"`
}

type handoverFile struct {
	FH       uint32
	Node     uint64
	Dir      bool     `json:",omitempty"`
	ReadOnly bool     `json:",omitempty"`
	Owners   []uint64 `json:",omitempty"`
	Cookie   uint64   `json:",omitempty"` // directories: READDIRPLUS position
	Verf     []byte   `json:",omitempty"`
}

type handoverUnlock struct {
	FH    []byte
	Owner uint64
	// Handle and Node are the RELEASE's file handle and nodeid: the
	// successor keeps the handle taken until the kernel sends the
	// RELEASE again.
	Handle uint32 `json:",omitempty"`
	Node   uint64 `json:",omitempty"`
}

type handoverLock struct {
	FH         []byte
	Owner      uint64
	Start, End uint64
	Exclusive  bool
}

// adoptSlot is the node or file handle the next LOOKUP, OPEN or OPENDIR
// of a restore returns (restore registers them through go-fuse's own
// requests); empty outside a restore.
type adoptSlot struct {
	mu   sync.Mutex
	name string
	in   *fs.Inode
	file fs.FileHandle
}

func (a *adoptSlot) set(name string, in *fs.Inode, f fs.FileHandle) {
	a.mu.Lock()
	a.name, a.in, a.file = name, in, f
	a.mu.Unlock()
}

// lookup returns the node a restore registers under name, if any.
func (a *adoptSlot) lookup(name string) *fs.Inode {
	if !strings.HasPrefix(name, adoptPrefix) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.name != name {
		return nil
	}
	return a.in
}

// opened returns the file handle a restore registers, if any.
func (a *adoptSlot) opened() fs.FileHandle {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.file
}

// adoptPrefix starts the names restore looks nodes up by: a NUL, which
// no name from the kernel holds.
const adoptPrefix = "\x00handover-"

// dummyHandle fills a file handle number no open file of the old process
// had, during a restore; released at its end.
type dummyHandle struct{}

// Handover hands the mount over to the successor at the other end of
// conn (see the package's Handover section) and returns what it carried.
// On success the mount must not be unmounted nor its client closed: the
// process exits (its gate holds every request until then). Errors:
// ErrNoHandover, a drain past HandoverDrain, the write-back's, the
// socket's, or the successor's refusal; after any error the mount serves
// on.
func (m *Mount) Handover(ctx context.Context, conn *net.UnixConn) (HandoverStats, error) {
	st := HandoverStats{From: m.cfg.Version}
	if m.init == nil || m.devFD == nil || m.sys.gate == nil {
		return st, fmt.Errorf("%w: served over io_uring or by an unreadable go-fuse server", ErrNoHandover)
	}
	if !fuseuring.CanResend(m.init) {
		return st, fmt.Errorf("%w: %w", ErrNoHandover, fuseuring.ErrNoResend)
	}
	t, err := newGoFuseTable(m.sys.raw)
	if err != nil {
		return st, fmt.Errorf("%w: %w", ErrNoHandover, err)
	}
	start := time.Now()
	g := m.sys.gate
	dctx, cancel := context.WithTimeout(ctx, HandoverDrain)
	defer cancel()
	fail := func(err error) (HandoverStats, error) {
		g.reopen()
		klog.ErrorS(err, "fusefs: handover failed, serving on", "dir", m.dir)
		return st, err
	}
	if err := g.close(dctx); err != nil {
		return fail(fmt.Errorf("fusefs: handover: requests in flight: %w", err))
	}
	nodes, files, err := t.snapshot()
	if err != nil {
		return fail(err)
	}
	for _, tn := range nodes {
		n, ok := tn.inode.Operations().(*node)
		if !ok {
			return fail(fmt.Errorf("%w: node %d is a %T", ErrNoHandover, tn.nodeID, tn.inode.Operations()))
		}
		if sh := n.shared.Load(); sh != nil {
			if errno := sh.wb.sync(dctx); errno != 0 {
				return fail(fmt.Errorf("fusefs: handover: write-back of %s: %w", n.fh, errno))
			}
		}
	}
	g.freeze()
	s, err := m.handoverState(nodes, files)
	if err != nil {
		return fail(err)
	}
	s.Requests, s.Closed = g.holding(), start
	fd, err := m.devFD()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrNoHandover, err))
	}
	err = sendState(conn, fd, s)
	unix.Close(fd)
	if err != nil {
		return fail(fmt.Errorf("fusefs: handover: send: %w", err))
	}
	_ = conn.SetReadDeadline(time.Now().Add(handoverAckTimeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("fusefs: handover: no answer from the successor: %w", err))
	}
	line = strings.TrimSpace(line)
	to, ok := strings.CutPrefix(line, "ok ")
	if !ok {
		return fail(fmt.Errorf("fusefs: handover refused by the successor: %s", line))
	}
	st.To, st.Paused = to, time.Since(start)
	st.Nodes, st.Files, st.Locks, st.Held = len(s.Nodes), len(s.Files), len(s.Held), g.holding()
	klog.InfoS("fusefs: handed over", "dir", m.dir, "from", st.From, "to", st.To, "paused", st.Paused,
		"nodes", st.Nodes, "files", st.Files, "locks", st.Locks, "held_requests", st.Held)
	return st, nil
}

// handoverState reads the state to send, the gate frozen.
func (m *Mount) handoverState(nodes []tableNode, files []tableFile) (*handoverState, error) {
	s := &handoverState{Version: m.cfg.Version, Source: m.cfg.Source, RootFH: rootFH(m.Client), Init: *m.init}
	ids := make(map[*node]uint64, len(nodes))
	for _, tn := range nodes {
		ids[tn.inode.Operations().(*node)] = tn.nodeID
	}
	for _, tn := range nodes {
		n := tn.inode.Operations().(*node)
		sa := tn.inode.StableAttr()
		hn := handoverNode{ID: tn.nodeID, Lookups: tn.lookups, FH: n.fh.Bytes(), Ino: sa.Ino, Gen: sa.Gen, Mode: sa.Mode}
		if name, p := tn.inode.Parent(); p != nil {
			if pn, ok := p.Operations().(*node); ok && ids[pn] != 0 {
				hn.Parent, hn.Name = ids[pn], name
			}
		}
		if sh := n.shared.Load(); sh != nil {
			sh.mu.Lock()
			if sl := sh.silly; sl != nil && ids[sl.dir] != 0 {
				hn.SillyDir, hn.SillyName = ids[sl.dir], sl.name
			}
			sh.mu.Unlock()
		}
		s.Nodes = append(s.Nodes, hn)
	}
	for _, tf := range files {
		hf := handoverFile{FH: tf.fh, Node: tf.nodeID}
		switch f := tf.file.(type) {
		case *openFile:
			hf.ReadOnly, hf.Owners = f.readOnly, f.lockOwnerList()
		case *dirStream:
			hf.Dir, hf.Cookie, hf.Verf = true, f.cookie, f.verf[:]
		default:
			return nil, fmt.Errorf("%w: file handle %d is a %T", ErrNoHandover, tf.fh, tf.file)
		}
		s.Files = append(s.Files, hf)
	}
	for _, u := range m.sys.unlocks.list() {
		s.Unlocks = append(s.Unlocks, handoverUnlock{FH: []byte(u.fh), Owner: u.owner, Handle: uint32(u.handle), Node: u.node})
	}
	ls := m.Client.Locks().State()
	s.Owners = ls.Owners
	for _, h := range ls.Held {
		s.Held = append(s.Held, handoverLock{FH: h.FH.Bytes(), Owner: h.Owner, Start: h.Start, End: h.End, Exclusive: h.Exclusive})
	}
	return s, nil
}

// sendState writes the state's length (8 bytes, big-endian) with fd
// attached, then the state as JSON.
func sendState(conn *net.UnixConn, fd int, s *handoverState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(b)))
	if _, _, err := conn.WriteMsgUnix(hdr[:], unix.UnixRights(fd), nil); err != nil {
		return err
	}
	_, err = conn.Write(b)
	return err
}

// maxHandoverState bounds the state a successor reads: 1 GiB.
const maxHandoverState = 1 << 30

// recvState reads what sendState wrote: the fd (close-on-exec) and state.
func recvState(conn *net.UnixConn) (int, *handoverState, error) {
	var hdr [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(hdr[:], oob)
	if err != nil {
		return -1, nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, nil, fmt.Errorf("fusefs: handover: no /dev/fuse descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, nil, fmt.Errorf("fusefs: handover: no /dev/fuse descriptor received (%v)", err)
	}
	fd := fds[0]
	unix.CloseOnExec(fd)
	if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	size := binary.BigEndian.Uint64(hdr[:])
	if size > maxHandoverState {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("fusefs: handover: state of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(conn, b); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	var s handoverState
	if err := json.Unmarshal(b, &s); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("fusefs: handover: state: %w", err)
	}
	return fd, &s, nil
}

// Adopt takes over the mount on dir that the process at the other end of
// conn serves (Mount.Handover there): it receives the /dev/fuse
// descriptor and the state, mounts cfg's export with a new NFS client,
// restores the nodes, open files and locks, answers "ok" with
// cfg.Version, and serves. Once the old process has closed conn (it
// exited), the kernel is asked to send again the requests it held (and
// those this process is handling, each answered once).
// Errors: the socket's, the client's mount errors, a different root file
// handle, a state that cannot be restored; the old process serves on
// after any.
func Adopt(ctx context.Context, dir string, cfg Config, conn *net.UnixConn) (*Mount, HandoverStats, error) {
	st := HandoverStats{To: cfg.Version}
	refuse := func(err error) (*Mount, HandoverStats, error) {
		fmt.Fprintf(conn, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return nil, st, err
	}
	fd, s, err := recvState(conn)
	if err != nil {
		return refuse(err)
	}
	st.From = s.Version
	closeFD := func() { unix.Close(fd) }
	co, err := ClientOptions(cfg)
	if err != nil {
		closeFD()
		return refuse(err)
	}
	c, err := client.Mount(ctx, co)
	if err != nil {
		closeFD()
		return refuse(err)
	}
	m, err := adopt(ctx, c, dir, cfg, fd, s, false)
	if err != nil {
		closeFD()
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Locks().Adopt(client.LockState{}) // nothing: its locks are the old process's
		_ = c.Unmount(uctx)
		return refuse(err)
	}
	if _, err := fmt.Fprintf(conn, "ok %s\n", cfg.Version); err != nil {
		// the old process may serve on: two servers must not answer
		// one connection
		return nil, st, fmt.Errorf("fusefs: handover: answer: %w (the old process serves on; this one must exit)", err)
	}
	st.Paused = time.Since(s.Closed)
	st.Nodes, st.Files, st.Locks, st.Held = len(s.Nodes), len(s.Files), len(s.Held), s.Requests
	klog.InfoS("fusefs: took the mount over", "dir", dir, "from", st.From, "to", st.To, "paused", st.Paused,
		"nodes", st.Nodes, "files", st.Files, "locks", st.Locks, "held_requests", st.Held)
	if len(s.Unlocks) > 0 {
		go unlockCarried(dir, c, s.Unlocks)
	}
	if st.Locks > 0 {
		// the server may have restarted during the pause, its SM_NOTIFY
		// going to the old process: ask for the locks again (reclaimed
		// in its grace period)
		go func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c.Locks().Confirm(cctx)
		}()
	}
	_ = m.ring.ServeAdopted(false)
	go func() {
		// the old process exits after "ok": its end of conn closes
		_ = conn.SetReadDeadline(time.Now().Add(handoverAckTimeout))
		_, _ = io.Copy(io.Discard, conn)
		conn.Close()
		if err := m.ring.Resend(); err != nil {
			klog.ErrorS(err, "fusefs: requests the old process held are not sent again", "dir", dir)
			return
		}
		klog.InfoS("fusefs: the kernel sends again the requests the old process held", "dir", dir)
	}()
	return m, st, nil
}

// carriedUnlockTimeout bounds the unlocks a handover carried: past the
// server's grace period (90 s by default on Linux).
const carriedUnlockTimeout = 10 * time.Minute

// unlockCarried makes the unlocks of RELEASEs the old process gave up in
// the server's grace period.
func unlockCarried(dir string, c *client.Client, us []handoverUnlock) {
	ctx, cancel := context.WithTimeout(context.Background(), carriedUnlockTimeout)
	defer cancel()
	for _, u := range us {
		fh, err := nfs3.NewFH(u.FH)
		if err == nil {
			err = c.Locks().UnlockOwner(ctx, fh, u.Owner)
		}
		if err != nil {
			klog.ErrorS(err, "fusefs: unlock at a close, carried by the handover, failed", "dir", dir, "owner", u.Owner)
			continue
		}
		klog.InfoS("fusefs: unlocked at a close carried by the handover", "dir", dir, "fh", fh.String(), "owner", u.Owner)
	}
}

// adopt prepares the connection of fd for client c with the state s;
// reading it starts at m.ring.ServeAdopted.
func adopt(ctx context.Context, c *client.Client, dir string, cfg Config, fd int, s *handoverState, crashed bool) (*Mount, error) {
	if !crashed && string(rootFH(c)) != string(s.RootFH) {
		return nil, fmt.Errorf("fusefs: handover: the export's root file handle differs from the old process's")
	}
	sys, root, fsopts, err := prepare(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	rs := fuseuring.NewServer(fd, dir, &fsopts.MountOptions, fuseuring.Config{Inline: sys.answersAlone})
	fsopts.ServerCallbacks = rs
	sys.raw = fs.NewNodeFS(root, fsopts)
	sys.owners = &lockOwners{RawFileSystem: sys.raw}
	sys.gate = newGate(sys.owners)
	if err := restore(ctx, sys, s, crashed); err != nil {
		sys.cancel()
		return nil, err
	}
	var ls client.LockState
	ls.Owners = s.Owners
	for _, h := range s.Held {
		fh, err := nfs3.NewFH(h.FH)
		if err != nil {
			sys.cancel()
			return nil, err
		}
		ls.Held = append(ls.Held, client.HeldLock{FH: fh, Owner: h.Owner, Start: h.Start, End: h.End, Exclusive: h.Exclusive})
	}
	if err := c.Locks().Adopt(ls); err != nil {
		sys.cancel()
		return nil, err
	}
	if err := rs.Adopt(sys.gate, s.Init); err != nil {
		sys.cancel()
		return nil, err
	}
	go sys.intr.watch(sys.bg)
	init := s.Init
	if cfg.MapFile != "" {
		if err := startStateMap(sys, cfg.MapFile, &init, s); err != nil {
			klog.ErrorS(err, "fusefs: no state map: a restarted mount process could not take this mount up", "dir", dir)
		}
	}
	devFD := func() (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3) }
	return &Mount{Client: c, sys: sys, server: rs, ring: rs, dir: dir, cancel: sys.cancel, byFD: true, cfg: cfg, init: &init, devFD: devFD}, nil
}

// restore registers the nodes and file handles of s in go-fuse's table of
// sys under the same numbers: nodes in the order of their nodeids, each
// looked up (by a name only restore uses, in the root) as many times as
// the kernel did, after empty inodes that take the nodeids no node has
// now; then open files and directories in the order of their handles,
// after placeholders for the free numbers, released at the end.
func restore(ctx context.Context, sys *fsys, s *handoverState, crashed bool) error {
	t, err := newGoFuseTable(sys.raw)
	if err != nil {
		return err
	}
	rootIn := sys.root.EmbeddedInode()
	byID := map[uint64]*fs.Inode{1: rootIn}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].ID < s.Nodes[j].ID })
	for _, hn := range s.Nodes {
		if hn.ID == fuse.FUSE_ROOT_ID {
			continue
		}
		for t.nextNodeID() < hn.ID {
			rootIn.NewInode(ctx, &fs.Inode{}, fs.StableAttr{Mode: fuse.S_IFREG})
		}
		fh, err := nfs3.NewFH(hn.FH)
		if err != nil {
			return err
		}
		in := rootIn.NewInode(ctx, &node{sys: sys, fh: fh}, fs.StableAttr{Mode: hn.Mode, Ino: hn.Ino, Gen: hn.Gen})
		if id, err := nodeIDOf(in); err != nil || id != hn.ID {
			return fmt.Errorf("fusefs: handover: node %d registered as %d (%v)", hn.ID, id, err)
		}
		name := fmt.Sprintf("%s%d", adoptPrefix, hn.ID)
		sys.adopt.set(name, in, nil)
		for range hn.Lookups {
			var out fuse.EntryOut
			if st := sys.raw.Lookup(nil, &fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, name, &out); !st.Ok() || out.NodeId != hn.ID {
				sys.adopt.set("", nil, nil)
				return fmt.Errorf("fusefs: handover: node %d looked up as %d: %v", hn.ID, out.NodeId, st)
			}
		}
		sys.adopt.set("", nil, nil)
		rootIn.RmChild(name)
		byID[hn.ID] = in
	}
	for _, hn := range s.Nodes {
		in := byID[hn.ID]
		if p := byID[hn.Parent]; p != nil && hn.Parent != 0 && hn.Name != "" && hn.ID != fuse.FUSE_ROOT_ID {
			p.AddChild(hn.Name, in, true)
		}
		if d := byID[hn.SillyDir]; d != nil && hn.SillyName != "" {
			sh := in.Operations().(*node).sharedFile()
			sh.mu.Lock()
			sh.silly = &silly{dir: d.Operations().(*node), name: hn.SillyName}
			sh.mu.Unlock()
		}
	}
	// the handles of RELEASEs whose unlock is carried stay taken (by a
	// dummyHandle) until the kernel sends the RELEASE again
	released := map[uint32]uint64{}
	for _, u := range s.Unlocks {
		if u.Handle != 0 && byID[u.Node] != nil {
			released[u.Handle] = u.Node
		}
	}
	files := append([]handoverFile(nil), s.Files...)
	for h, nid := range released {
		files = append(files, handoverFile{FH: h, Node: nid, ReadOnly: true})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].FH < files[j].FH })
	var dummies []fuse.ReleaseIn
	next := uint64(1) // go-fuse's first file handle; 0 is none
	for _, hf := range files {
		in := byID[hf.Node]
		if in == nil {
			return fmt.Errorf("fusefs: handover: file handle %d of unknown node %d", hf.FH, hf.Node)
		}
		n := in.Operations().(*node)
		_, rel := released[hf.FH]
		for ; next <= uint64(hf.FH); next++ {
			var h fs.FileHandle = dummyHandle{}
			if next == uint64(hf.FH) && !rel {
				if hf.Dir {
					d := &dirStream{n: n, cookie: hf.Cookie}
					copy(d.verf[:], hf.Verf)
					h = d
				} else {
					f := n.open(hf.ReadOnly)
					if crashed && !hf.ReadOnly {
						// what the dead process acknowledged and had not
						// yet written may be lost: the next fsync of this
						// open file says so (openFile.lost), whether or
						// not this process gets a WRITE of it first
						f.lost = true
					}
					if len(hf.Owners) > 0 {
						f.lockOwners = map[uint64]bool{}
						for _, o := range hf.Owners {
							f.lockOwners[o] = true
						}
					}
					h = f
				}
			}
			sys.adopt.set("", nil, h)
			var out fuse.OpenOut
			var st fuse.Status
			if hf.Dir && next == uint64(hf.FH) {
				st = sys.raw.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: hf.Node}}, &out)
			} else {
				st = sys.raw.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: hf.Node}, Flags: syscall.O_RDONLY}, &out)
			}
			sys.adopt.set("", nil, nil)
			if !st.Ok() || out.Fh != next {
				return fmt.Errorf("fusefs: handover: file handle %d opened as %d: %v", next, out.Fh, st)
			}
			if next != uint64(hf.FH) {
				dummies = append(dummies, fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: hf.Node}, Fh: next})
			}
		}
	}
	for i := range dummies {
		sys.raw.Release(nil, &dummies[i])
	}
	if crashed {
		sys.gate.clamp.Store(t)
	}
	return nil
}

// errLostWrites is the error of the next fsync (and of each flush until
// then) of a file open for writing when its mount process died: writes it
// had acknowledged may not have reached the server (EIO).
var errLostWrites = fmt.Errorf("fusefs: the mount process serving this file died; writes it acknowledged may be lost: %w", syscall.EIO)

// startStateMap starts the state map of sys at path (statemap.go).
func startStateMap(sys *fsys, path string, init *fuse.InitIn, s *handoverState) error {
	t, err := newGoFuseTable(sys.raw)
	if err != nil {
		return err
	}
	sm, err := createStateMap(path, t, init, s)
	if err != nil {
		return err
	}
	sys.gate.rec.Store(sm)
	return nil
}

// Recover takes up the FUSE connection cfg.FD of dir after the process
// that served it died: the kernel connection is alive (another process,
// the mounter, kept a descriptor of it), the state is the dead process's
// state map cfg.MapFile. It mounts the export with a new NFS client,
// restores the nodes and open handles of the map (each node with one
// lookup: FORGETs are bounded to it), asks the kernel to send again the
// requests the dead process had read and not answered (FUSE_NOTIFY_RESEND;
// on kernels before 6.9 those stay unanswered, their callers blocked until
// the mount is aborted), then serves. Each file that was open for
// writing reports EIO at its next fsync, and at each flush until then
// (errLostWrites). The dead process's NLM locks are not known: they stay
// on the server until it hears of a reboot of the node. Errors: the
// map's, the client's, a restore's.
func Recover(ctx context.Context, dir string, cfg Config) (*Mount, HandoverStats, error) {
	st := HandoverStats{To: cfg.Version, From: "crashed"}
	start := time.Now()
	if cfg.FD <= 0 || cfg.MapFile == "" {
		return nil, st, fmt.Errorf("fusefs: recover needs the connection's fd and a state map")
	}
	s, err := readStateMap(cfg.MapFile)
	if err != nil {
		return nil, st, err
	}
	if !fuseuring.CanResend(&s.Init) {
		klog.InfoS("fusefs: the kernel cannot resend requests: those the dead process held stay unanswered", "dir", dir)
	}
	co, err := ClientOptions(cfg)
	if err != nil {
		return nil, st, err
	}
	c, err := client.Mount(ctx, co)
	if err != nil {
		return nil, st, err
	}
	m, err := adopt(ctx, c, dir, cfg, cfg.FD, s, true)
	if err != nil {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Unmount(uctx)
		return nil, st, err
	}
	// before any request is read here: the kernel resends only those
	// the dead process read (fuseuring.Server.ServeAdopted)
	if err := m.ring.ServeAdopted(fuseuring.CanResend(&s.Init)); err != nil {
		klog.ErrorS(err, "fusefs: requests the dead process held are not sent again", "dir", dir)
	}
	st.Paused = time.Since(start)
	st.Nodes, st.Files = len(s.Nodes), len(s.Files)
	klog.InfoS("fusefs: took the mount up after its process died", "dir", dir, "to", st.To, "restore", st.Paused, "nodes", st.Nodes, "files", st.Files)
	return m, st, nil
}

// rootFH returns the bytes of c's root file handle.
func rootFH(c *client.Client) []byte {
	fh := c.Root()
	return fh.Bytes()
}
