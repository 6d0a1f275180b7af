package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsmstate"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// bootIDPath is where Linux tells the current boot apart from earlier ones.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// HostState is this host's NSM state (X/Open XNFS chapter 11) kept in a
// directory, as Linux rpc.statd keeps /var/lib/nfs: the state number
// ("state", package nsmstate: odd while the host is up, the next odd
// number at each boot), the boot it belongs to ("boot_id"), and the
// servers this host held locks on ("sm/<server>"). Every mount of the host may share one directory:
// the first HostState opened after a reboot increases the state and
// sends SM_NOTIFY to the recorded servers, which then free the locks the
// host held before it went down; later opens in the same boot keep the
// state. It is safe for concurrent use.
type HostState struct {
	dir        string
	callerName string
	opts       NotifyOptions

	mu    sync.Mutex
	state int32
	mon   map[string]bool
}

// NotifyOptions say how SM_NOTIFY reaches the servers of a HostState.
type NotifyOptions struct {
	// RPCBindPort is the port of the servers' rpcbind, where their NSM is
	// found; 0 means 111.
	RPCBindPort int
	// NSMPort, if not 0, is the servers' NSM port (no rpcbind).
	NSMPort int
	// Timeout bounds each notification; 0 means 10 s.
	Timeout time.Duration
}

// OpenHostState opens (creating) the state directory dir for a host
// named callerName (the mon_name of its notifications). After a reboot
// (the boot id differs from the recorded one, or none is recorded) it
// increases the state and notifies the recorded servers in the
// background, forgetting each one that answered. Errors: the directory's
// I/O errors.
func OpenHostState(dir, callerName string, o NotifyOptions) (*HostState, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sm"), 0o700); err != nil {
		return nil, fmt.Errorf("nsm state: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nsm state: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("nsm state: lock %s: %w", dir, err)
	}
	h := &HostState{dir: dir, callerName: callerName, opts: o, mon: map[string]bool{}}
	statePath := filepath.Join(dir, "state")
	st, err := nsmstate.Read(statePath)
	if err != nil && !errors.Is(err, nsmstate.ErrBad) {
		return nil, err
	}
	h.state = st // a bad number counts as none: the host starts over
	boot, _ := os.ReadFile(bootIDPath)
	old, _ := os.ReadFile(filepath.Join(dir, "boot_id"))
	servers, err := h.recorded()
	if err != nil {
		return nil, err
	}
	rebooted := len(boot) == 0 || string(old) != string(boot)
	if rebooted || h.state&1 == 0 {
		h.state = nsmstate.Next(h.state)
		if err := nsmstate.Write(statePath, h.state); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(filepath.Join(dir, "boot_id"), boot); err != nil {
			return nil, err
		}
		if len(servers) > 0 {
			go h.notifyAll(servers)
		}
	} else {
		for _, s := range servers {
			h.mon[s] = true
		}
	}
	klog.InfoS("NSM host state", "dir", dir, "state", h.state, "rebooted", rebooted, "servers", len(servers))
	return h, nil
}

// State returns the host's state number.
func (h *HostState) State() int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Monitored returns the servers recorded as holding this host's locks.
func (h *HostState) Monitored() []string {
	s, _ := h.recorded()
	return s
}

func (h *HostState) recorded() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(h.dir, "sm"))
	if err != nil {
		return nil, fmt.Errorf("nsm state: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue // nsmstate.WriteFile's temporary file; no host name starts with "."
		}
		if s, err := url.PathUnescape(e.Name()); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// monitor records server as holding a lock of this host.
func (h *HostState) monitor(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mon[server] {
		return
	}
	if err := atomicfile.Write(filepath.Join(h.dir, "sm", url.PathEscape(server)), []byte(server+"\n")); err != nil {
		klog.ErrorS(err, "NSM: server not recorded: it will not be told of this host's reboot", "server", server)
		return
	}
	h.mon[server] = true
}

// notifyAll sends SM_NOTIFY to each server, forgetting those that answer.
func (h *HostState) notifyAll(servers []string) {
	for _, s := range servers {
		if err := h.Notify(context.Background(), s); err != nil {
			klog.ErrorS(err, "NSM: SM_NOTIFY failed: the server may keep this host's old locks", "server", s)
			continue
		}
		_ = os.Remove(filepath.Join(h.dir, "sm", url.PathEscape(s)))
	}
}

// Notify tells server that this host rebooted (SM_NOTIFY with mon_name
// the host's caller name and its state; XNFS chapter 11), so that it
// frees the locks the host held before.
func (h *HostState) Notify(ctx context.Context, server string) error {
	t := h.opts.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	port := h.opts.NSMPort
	if port == 0 {
		rb := h.opts.RPCBindPort
		if rb == 0 {
			rb = PortmapPort
		}
		p, err := GetPort(ctx, hostPort(server, rb), nsm.Program, nsm.Version, sunrpc.TCPOptions{})
		if err != nil {
			return err
		}
		port = p
	}
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(hostPort(server, port), sunrpc.TCPOptions{}), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2}})
	if err != nil {
		return err
	}
	defer c.Close()
	a := nsm.StatChge{MonName: h.callerName, State: h.State()}
	err = c.Call(ctx, sunrpc.CallSpec{
		Prog: nsm.Program, Vers: nsm.Version, Proc: nsm.ProcNotify,
		Args:         func(b *sunrpc.Builder) { a.Encode(&b.Encoder) },
		MaxReplySize: replyHeaderMax,
	})
	if err != nil {
		return fmt.Errorf("nsm SM_NOTIFY %s: %w", server, err)
	}
	klog.InfoS("NSM: SM_NOTIFY sent", "server", server, "mon_name", h.callerName, "state", a.State)
	return nil
}
