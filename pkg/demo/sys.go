package demo

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
)

// fuseType is the file system type of the driver's FUSE mounts.
const fuseType = "fuse.nfsrdma"

// mountsUnder returns the mount points at or beneath dir, from
// /proc/self/mountinfo (never touching the mount points themselves).
func mountsUnder(dir string) ([]mountutils.MountInfo, error) {
	mis, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountutils.MountInfo
	for _, mi := range mis {
		if within(mi.MountPoint, dir) {
			out = append(out, mi)
		}
	}
	return out, nil
}

// within reports whether p is dir or beneath it (clean absolute paths).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// sweepMounts lazily unmounts (MNT_DETACH) whatever is still mounted
// beneath dir, deepest first, and returns the mount points it unmounted.
// It is the last resort of a teardown that failed.
func sweepMounts(dir string) []string {
	ms, err := mountsUnder(dir)
	if err != nil {
		return nil
	}
	var done []string
	for i := len(ms) - 1; i >= 0; i-- {
		if err := unix.Unmount(ms[i].MountPoint, unix.MNT_DETACH); err == nil {
			done = append(done, ms[i].MountPoint)
		}
	}
	return done
}

// mountProcesses returns the PIDs of `driver mount` processes serving a
// mount point beneath dir (their last argument), from /proc.
func mountProcesses(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 3 || args[1] != "mount" || !within(filepath.Clean(args[len(args)-1]), dir) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue // exited, not yet reaped
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// killProcesses ends pids with SIGTERM, then SIGKILL after 3 s.
func killProcesses(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, p := range pids {
		for syscall.Kill(p, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// tcpSocket is one line of /proc/PID/net/tcp.
type tcpSocket struct {
	localPort, remotePort int
	state                 string // hex, "01" established, "0A" listen
	inode                 string
}

func readTCP(path string) ([]tcpSocket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpSocket
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		out = append(out, tcpSocket{localPort: hexPort(fs[1]), remotePort: hexPort(fs[2]), state: fs[3], inode: fs[9]})
	}
	return out, sc.Err()
}

func hexPort(addr string) int {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return -1
	}
	n, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// listening reports whether a socket listens on TCP port (IPv4).
func listening(port int) bool {
	ss, err := readTCP("/proc/net/tcp")
	if err != nil {
		return false
	}
	for _, s := range ss {
		if s.state == "0A" && s.localPort == port {
			return true
		}
	}
	return false
}

// connections returns the local ports of the established TCP
// connections process pid holds to remote port: its socket descriptors
// matched against the socket table. The iWARP stack runs over TCP, so
// this finds RDMA connections too.
func connections(pid, remotePort int) ([]int, error) {
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ss, err := readTCP("/proc/" + strconv.Itoa(pid) + "/net/tcp")
	if err != nil {
		return nil, err
	}
	var local []int
	for _, s := range ss {
		if s.state == "01" && s.remotePort == remotePort && inodes[s.inode] {
			local = append(local, s.localPort)
		}
	}
	return local, nil
}

// freeBytes returns the bytes available to root on dir's file system.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bfree) * st.Bsize, nil
}

// kvRE matches klog's key="value" pairs.
var kvRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

// mountDevice reads the RDMA device a `driver mount` process chose from
// its log (the transport.LogDeviceChosen line): "software iWARP siw0"
// or "mlx5_0 (roce)". ok is false when the log has no such line.
func mountDevice(logPath string) (string, bool) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `"`+transport.LogDeviceChosen+`"`) {
			continue
		}
		kv := map[string]string{}
		for _, m := range kvRE.FindAllStringSubmatch(l, -1) {
			kv[m[1]] = m[2]
		}
		if kv["device"] == "" {
			return "", false
		}
		if kv["provider"] == "siw" {
			return "software iWARP " + kv["device"], true
		}
		return kv["device"] + " (" + kv["transport"] + ")", true
	}
	return "", false
}
