package mounter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
)

// launchMode is how a mount process gets its FUSE connection.
type launchMode int

const (
	// modeMount: a /dev/fuse fd the node plugin mounted; the process
	// answers INIT.
	modeMount launchMode = iota
	// modeRecover: the mounter's duplicate of the connection, after the
	// process serving it died (driver mount --recover).
	modeRecover
	// modeTakeOver: from the process serving the mount, over its handover
	// socket (driver mount --takeover).
	modeTakeOver
)

// Recovery limits: at most maxRecoveries restarts of one mount within
// recoveryWindow; past that the mount is left to end (its callers get
// ENOTCONN once the mounter lets the connection go).
const (
	maxRecoveries  = 3
	recoveryWindow = time.Minute
)

// recoveries counts the recent restarts of each target.
var recoveries = map[string][]time.Time{}

// crashed reports whether a mount process's end err (exec.Cmd.Wait's) is
// a crash: killed by a signal other than SIGTERM and SIGINT (SIGKILL, the
// OOM killer, SIGSEGV), or exit status 2 (a Go panic or fatal error).
// A process that ends otherwise unmounted, failed to mount, or handed
// its mount over.
func crashed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	if ws.Signaled() {
		return ws.Signal() != syscall.SIGTERM && ws.Signal() != syscall.SIGINT
	}
	return ws.Exited() && ws.ExitStatus() == 2
}

// writeState records m in its state file.
func (s *Server) writeState(m Mount) {
	b, err := json.Marshal(m)
	if err == nil {
		err = atomicfile.Write(s.statePath(m.Target), b)
	}
	if err != nil {
		klog.ErrorS(err, "mounter: state file", "target", m.Target)
	}
}

// dupFile returns a close-on-exec duplicate of f, nil if it fails.
func dupFile(f *os.File) *os.File {
	if f == nil {
		return nil
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		klog.ErrorS(err, "mounter: no duplicate of a /dev/fuse descriptor: a crash of its mount process ends the mount")
		return nil
	}
	return os.NewFile(uintptr(fd), "fuse")
}

// fuseOf returns a duplicate of the /dev/fuse descriptor process pid
// holds (pidfd_getfd(2), Linux 5.6).
func fuseOf(pid int) (*os.File, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		// by its device number: the link's text is the path as this
		// mount namespace sees it ("/" when another container opened it)
		if !isFuseDev(dir + "/" + e.Name()) {
			continue
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return nil, fmt.Errorf("pidfd_open: %w", err)
		}
		fd, err := unix.PidfdGetfd(pfd, n, 0)
		unix.Close(pfd)
		if err != nil {
			return nil, fmt.Errorf("pidfd_getfd: %w", err)
		}
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), "fuse"), nil
	}
	return nil, fmt.Errorf("process %d holds no /dev/fuse descriptor", pid)
}

// fuseMajor and fuseMinor are /dev/fuse's device number (Linux's
// Documentation/admin-guide/devices.txt: 10, 229).
const fuseMajor, fuseMinor = 10, 229

// isFuseDev reports whether the file path (a /proc/PID/fd link, followed)
// is the FUSE device.
func isFuseDev(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == fuseMajor && unix.Minor(st.Rdev) == fuseMinor
}

// recover starts a process that takes p's connection up after p's process
// died (crash, kill -9) and reports whether it started one: not after
// the node plugin released the mount, without a duplicate of the
// connection, or past maxRecoveries within recoveryWindow.
func (s *Server) recover(p *proc) bool {
	s.mu.Lock()
	ok := !p.released && p.fuse != nil && p.m.MapFile != "" && s.mounts[p.m.Target] == p
	if ok {
		now := time.Now()
		var recent []time.Time
		for _, t := range recoveries[p.m.Target] {
			if now.Sub(t) < recoveryWindow {
				recent = append(recent, t)
			}
		}
		ok = len(recent) < maxRecoveries
		recoveries[p.m.Target] = append(recent, now)
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	klog.InfoS("mounter: mount process died; taking its connection up", "target", p.m.Target, "pid", p.m.PID)
	m, err := s.launch(context.Background(), p.m, p.fuse, modeRecover)
	p.fuse.Close()
	if err != nil {
		klog.ErrorS(err, "mounter: recovery failed", "target", p.m.Target)
		s.forget(p)
		s.forgetKept(p.m.Target)
		return true
	}
	klog.InfoS("mounter: mount taken up again", "target", m.Target, "pid", m.PID)
	close(p.done)
	return true
}

// takeOverAll hands every mount of a previous mounter whose process
// listens on a handover socket to a new process of s.Exe.
func (s *Server) takeOverAll(ctx context.Context) {
	for _, m := range s.List() {
		if m.HandoverSocket == "" {
			continue
		}
		if !listening(m) {
			continue
		}
		t0 := time.Now()
		nm, err := s.launch(ctx, m, nil, modeTakeOver)
		if err != nil {
			klog.ErrorS(err, "mounter: takeover failed; the old process serves on", "target", m.Target, "pid", m.PID)
			continue
		}
		klog.InfoS("mounter: mount taken over by this mounter's binary", "target", m.Target, "oldPID", m.PID, "pid", nm.PID, "took", time.Since(t0))
	}
}

// listening reports whether a process still listens on m's handover
// socket: a listening unix socket bound to that path is in this network
// namespace's socket table (/proc/net/unix), which holds the sockets of
// every process of the namespace, those of another mounter pod's PID
// namespace too (mounters and their mounts share the node's network). A
// process killed with SIGKILL leaves the socket file but not the
// listening socket. Connecting to probe it would start a handover.
func listening(m Mount) bool {
	if m.HandoverSocket == "" {
		return false
	}
	if _, err := os.Stat(m.HandoverSocket); err != nil {
		return false
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return true // no socket table: the file is all there is to go by
	}
	defer f.Close()
	return listensOn(f, m.HandoverSocket)
}

// listensOn reports whether the socket table in r (the format of
// /proc/net/unix: Num RefCount Protocol Flags Type St Inode Path) has a
// listening socket (flag __SO_ACCEPTCON, 0x10000) bound to path.
func listensOn(r io.Reader, path string) bool {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[7] != path {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err == nil && flags&0x10000 != 0 {
			return true
		}
	}
	return false
}
