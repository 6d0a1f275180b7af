// Package fusemount runs one NFS mount served through FUSE in the
// foreground, as `driver mount` does: it parses the nfs(5) options
// (package mountopts), builds the NFS transport (package transport: the
// RDMA device and RPC-over-RDMA dialer, or TCP), mounts the file system
// (package fusefs), serves the mount's Prometheus metrics on a unix socket
// when asked, and unmounts when the context ends.
package fusemount

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/fusecounters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// Config says what Run mounts and how.
type Config struct {
	// Source is "SERVER:/EXPORT" (an IPv6 server in brackets); Dir the
	// mount point.
	Source, Dir string
	// Options is the -o option list, comma-separated, in nfs(5)
	// vocabulary (mountopts.Parse).
	Options string
	// Debug logs every FUSE request.
	Debug bool
	// FD, when positive, is a /dev/fuse fd another process already
	// mounted on Dir (fusefs.Config.FD).
	FD int
	// ReadyFD, when positive, is an inherited fd to which one line is
	// written once mounted, "ok" or "error: MESSAGE", before it is
	// closed.
	ReadyFD int
	// MetricsSocket, if not "", is the unix socket this mount's
	// Prometheus metrics (nfsrdma_* only) are served on.
	MetricsSocket string
	// MachineName is the AUTH_SYS machine name of NFS calls ("": the host
	// name); LockCallerName the caller_name of NLM locks ("": the host
	// name); StateDir the node's NSM state directory ("": in memory).
	MachineName, LockCallerName, StateDir string
	// NodeLockSocket, if not "", is the node's lock callback service
	// (package lockcb, run by the mounter) this process takes its NLM and
	// NSM callbacks from instead of serving them itself
	// (client.UseNodeCallbacks).
	NodeLockSocket string
	// TLS are the PEM files of xprtsec=tls or mtls (RPC-with-TLS).
	TLS transport.TLSFiles
	// UnmountTimeout bounds the unmount once ctx ends, and again the
	// wait for a lazily unmounted mount; 0 means 10 s.
	UnmountTimeout time.Duration
	// HandoverSocket, if not "", is a unix socket this process listens
	// on for a successor: a process that connects there (Takeover) is
	// handed the mount (fusefs.Mount.Handover), and Run returns nil
	// without unmounting. A failed handover is logged; the mount serves
	// on.
	HandoverSocket string
	// Takeover, if not "", is the HandoverSocket of the process serving
	// Dir now: Run takes its mount over (fusefs.Adopt) instead of
	// mounting.
	Takeover string
	// Version is this binary's version (logs and metrics of handovers).
	Version string
	// MapFile, if not "", is where the mount keeps its state map
	// (fusefs.Config.MapFile) for a process that takes the connection up
	// after this one dies.
	MapFile string
	// Recover takes up the connection FD after the process that served
	// it died, from its MapFile (fusefs.Recover), instead of answering
	// INIT.
	Recover bool
}

// Run mounts cfg.Source on cfg.Dir and serves it until it is unmounted
// from outside (umount(8)) or ctx ends; then it unmounts (lazily when
// busy past cfg.UnmountTimeout). Errors: mountopts.ErrBadOption, the
// mount's (fusefs.NewMount), an unmount that fails, or a connection still
// in use after a lazy unmount (dropped when the process exits).
func Run(ctx context.Context, cfg Config) error {
	timeout := cfg.UnmountTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if cfg.NodeLockSocket != "" {
		client.UseNodeCallbacks(cfg.NodeLockSocket)
	}
	m, mm, err := mount(ctx, cfg, time.Now())
	ready(cfg.ReadyFD, err)
	if err != nil {
		return err
	}
	handovers, stopListen, err := listenHandover(cfg.HandoverSocket)
	if err != nil {
		return errors.Join(err, m.Unmount(timeout), m.Wait())
	}
	defer stopListen()
	if cfg.MetricsSocket != "" {
		// only nfsrdma_* metrics: the node gathers nothing else from mounts
		reg := prometheus.NewRegistry()
		reg.MustRegister(handoverMetrics(cfg.Version))
		reg.MustRegister(mm.rpc, metrics.NewClientCollector(m.Client.Stats, nil), counters.NewDeviceCollector(devselect.Counts, nil),
			fusecounters.NewMountMemoryCollector(m.Memory, nil), fusecounters.NewFUSETransportCollector(m.FUSETransport, nil))
		if mm.proto == mountopts.ProtoRDMA {
			reg.MustRegister(counters.NewTransportCollector(counters.RoleRequester, mm.rdma.Metrics, nil))
		}
		go func() {
			if err := metrics.ServeUnix(ctx, cfg.MetricsSocket, reg); err != nil {
				klog.ErrorS(err, "mount: metrics socket", "path", cfg.MetricsSocket)
			}
		}()
	}
	done := make(chan error, 1)
	go func() { done <- m.Wait() }()
	for {
		select {
		case err := <-done: // unmounted from outside
			return err
		case conn := <-handovers:
			st, err := m.Handover(ctx, conn)
			if err != nil {
				conn.Close()
				continue // logged; the mount serves on
			}
			// conn stays open until the process exits: its end tells
			// the successor that no request can be read here any
			// more, so that the kernel may send again those held
			// (a duplicate of its descriptor, which no finalizer
			// closes while this process still reads requests)
			keepOpen(conn)
			recordHandover(cfg.Dir, "from", st, nil)
			// the successor serves the connection: exit without
			// unmounting, unlocking or UMNT
			return nil
		case <-ctx.Done():
			return unmount(cfg, m, done, timeout)
		}
	}
}

// keepOpen duplicates c's descriptor (close-on-exec) and never closes
// the duplicate: c's socket stays open until the process exits, whatever
// becomes of c.
func keepOpen(c *net.UnixConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3)
	})
}

// unmount ends the mount once ctx ended (Run).
func unmount(cfg Config, m *fusefs.Mount, done chan error, timeout time.Duration) error {
	klog.InfoS("mount: signal received, unmounting", "dir", cfg.Dir)
	if err := m.Unmount(timeout); err != nil {
		return fmt.Errorf("unmount %s: %w", cfg.Dir, err)
	}
	// After a lazy unmount of a busy mount point the kernel keeps the
	// connection until its last user leaves; do not wait for that
	// forever: exiting closes /dev/fuse, which ends the connection
	// (its users then get ENOTCONN).
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("unmount %s: still in use after a lazy unmount; connection dropped", cfg.Dir)
	}
}

// mountMetrics are what a mount counts for its metrics socket.
type mountMetrics struct {
	proto string
	rpc   *metrics.RPCClient     // per-procedure calls, latency and bytes
	rdma  *rpcrdma.ClientMetrics // the RPC-over-RDMA transport (proto=rdma)
}

// mount parses the options, builds the NFS transport and mounts; start
// is when Run started (the pause a recovery reports).
func mount(ctx context.Context, cfg Config, start time.Time) (*fusefs.Mount, mountMetrics, error) {
	var mm mountMetrics
	o, err := mountopts.Parse(cfg.Options)
	if err != nil {
		return nil, mm, err
	}
	server, _, err := mountopts.SplitSource(cfg.Source)
	if err != nil {
		return nil, mm, err
	}
	fc := fusefs.Config{Source: cfg.Source, Options: o, Debug: cfg.Debug, FD: cfg.FD,
		LockCallerName: cfg.LockCallerName, StateDir: cfg.StateDir, Version: cfg.Version, MapFile: cfg.MapFile}
	fc.AuthSys.MachineName = cfg.MachineName
	mm.proto = o.Proto
	if cfg.MetricsSocket != "" {
		mm.rpc = metrics.NewRPCClient(nil)
		fc.WrapDial = mm.rpc.Dial
		mm.rdma = new(rpcrdma.ClientMetrics)
	}
	tr, err := transport.ForMount(server, o, mm.rdma)
	if err != nil {
		return nil, mm, err
	}
	fc.Dial, fc.Transport = tr.Dial, tr.Name
	if fc.TCP, err = transport.TCPForMount(server, o, cfg.TLS); err != nil {
		return nil, mm, err
	}
	if cfg.Takeover != "" {
		m, err := takeover(ctx, cfg, fc)
		if err == nil {
			go recordResent(ctx, cfg.Dir, m)
		}
		return m, mm, err
	}
	if cfg.Recover {
		called := time.Now()
		m, st, err := fusefs.Recover(ctx, cfg.Dir, fc)
		// the pause: from this process's Run (its flags parsed) to
		// serving; the time from the crash to this process's start (the
		// mounter's) is not seen here
		st.Paused += called.Sub(start)
		if err != nil {
			recordHandover(cfg.Dir, "recover", st, err)
			return nil, mm, err
		}
		go recordRecovery(ctx, cfg.Dir, m, st)
		return m, mm, nil
	}
	m, err := fusefs.NewMount(ctx, cfg.Dir, fc)
	return m, mm, err
}

// ready reports the outcome of mounting on the inherited fd (a pipe to the
// process that started us), if any: "ok\n" or "error: MESSAGE\n".
func ready(fd int, err error) {
	if fd <= 0 {
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	if err != nil {
		fmt.Fprintf(f, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Fprintln(f, "ok")
	}
	f.Close()
}
