package statmon

import (
	"context"
	"math"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsmstate"
)

// Defaults of a Monitor.
const (
	// DefaultRPCBind is the local rpcbind (RFC 1833), where the programs
	// of the monitors' callbacks are looked up.
	DefaultRPCBind = "127.0.0.1:111"
	// DefaultTimeout bounds one callback or one notification, 10 s.
	DefaultTimeout = 10 * time.Second
	// MaxMonitors is the most monitors kept; SM_MON past it answers
	// stat_fail.
	MaxMonitors = 16384
)

// Monitor is a host's status monitor (see the package comment). Set its
// fields before the first call; the zero value serves with the defaults.
// It is safe for concurrent use.
type Monitor struct {
	// RPCBind is the local rpcbind, "host:port"; "" means DefaultRPCBind.
	// A callback goes to the port it gives, at its host.
	RPCBind string
	// State returns the host's NSM state number (odd while the host is
	// up); nil means a number of nsmstate.Volatile taken at first use.
	State func() int32
	// PeerRPCBindPort is the port of the monitored hosts' rpcbind, where
	// SM_SIMU_CRASH finds their NSM; 0 means 111.
	PeerRPCBindPort int
	// Timeout bounds each callback and notification; 0 means
	// DefaultTimeout.
	Timeout time.Duration

	mu      sync.Mutex
	mon     map[nsm.MonID]*entry
	base    int32 // the state when State is nil
	crashes int32 // SM_SIMU_CRASH calls: the state is two on per call
}

// entry is one monitor's private bytes and the last state of its host
// seen in an SM_NOTIFY (0: none), so that a repeated notification calls
// back once.
type entry struct {
	priv [nsm.PrivSize]byte
	seen int32
}

// Registration is one monitor: what SM_MON asked.
type Registration struct {
	nsm.MonID
	Priv [nsm.PrivSize]byte
}

func (m *Monitor) rpcbind() string {
	if m.RPCBind == "" {
		return DefaultRPCBind
	}
	return m.RPCBind
}

func (m *Monitor) timeout() time.Duration {
	if m.Timeout <= 0 {
		return DefaultTimeout
	}
	return m.Timeout
}

// LocalState returns the host's NSM state number as SM_STAT answers it:
// State (or the volatile number), two on for each SM_SIMU_CRASH,
// wrapping below 2^31 with its parity kept.
func (m *Monitor) LocalState() int32 {
	var s int32
	if m.State != nil {
		s = m.State()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.State == nil {
		if m.base == 0 {
			m.base = nsmstate.Volatile()
		}
		s = m.base
	}
	v := int64(s) + 2*int64(m.crashes)
	for v > math.MaxInt32 {
		v -= math.MaxInt32 - 1
	}
	return int32(v)
}

// Monitors returns the monitors kept, sorted by mon_name, then my_name,
// my_prog, my_vers, my_proc.
func (m *Monitor) Monitors() []Registration {
	m.mu.Lock()
	out := make([]Registration, 0, len(m.mon))
	for id, e := range m.mon {
		out = append(out, Registration{MonID: id, Priv: e.priv})
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.MonName != b.MonName {
			return a.MonName < b.MonName
		}
		if a.MyID.MyName != b.MyID.MyName {
			return a.MyID.MyName < b.MyID.MyName
		}
		if a.MyID.MyProg != b.MyID.MyProg {
			return a.MyID.MyProg < b.MyID.MyProg
		}
		if a.MyID.MyVers != b.MyID.MyVers {
			return a.MyID.MyVers < b.MyID.MyVers
		}
		return a.MyID.MyProc < b.MyID.MyProc
	})
	return out
}

// monitor records a (SM_MON) and reports whether it is kept: my_prog must
// be NLM's, mon_name not empty, and there must be room. A monitor asked
// again gets the new private bytes.
func (m *Monitor) monitor(a *nsm.Mon) bool {
	if a.MonID.MyID.MyProg != nlm.Program || a.MonID.MonName == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mon == nil {
		m.mon = map[nsm.MonID]*entry{}
	}
	if e := m.mon[a.MonID]; e != nil {
		e.priv = a.Priv
		return true
	}
	if len(m.mon) >= MaxMonitors {
		return false
	}
	m.mon[a.MonID] = &entry{priv: a.Priv}
	return true
}

// unmonitor forgets the monitor id (SM_UNMON) and reports whether there
// was one.
func (m *Monitor) unmonitor(id nsm.MonID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.mon[id]
	delete(m.mon, id)
	return ok
}

// unmonitorAll forgets the monitors of my (SM_UNMON_ALL) and returns how
// many there were.
func (m *Monitor) unmonitorAll(my nsm.MyID) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id := range m.mon {
		if id.MyID == my {
			delete(m.mon, id)
			n++
		}
	}
	return n
}

// crash moves the state two on and forgets every monitor (SM_SIMU_CRASH);
// it returns the monitored hosts, each with the name the host's lock
// manager gave for this host (my_name), and the new state.
func (m *Monitor) crash() (peers [][2]string, state int32) {
	m.mu.Lock()
	m.crashes++
	seen := map[[2]string]bool{}
	for id := range m.mon {
		p := [2]string{id.MonName, id.MyID.MyName}
		if !seen[p] {
			seen[p] = true
			peers = append(peers, p)
		}
	}
	m.mon = nil
	m.mu.Unlock()
	sort.Slice(peers, func(i, j int) bool {
		return peers[i][0] < peers[j][0] || peers[i][0] == peers[j][0] && peers[i][1] < peers[j][1]
	})
	return peers, m.LocalState()
}

// Notify calls back the monitors of the host that sent a (SM_NOTIFY):
// those whose mon_name is a's mon_name (host names compare without case)
// or the caller's address peerIP, and that have not seen a's state yet.
// It returns once every callback answered or failed (each bounded by
// Timeout and ctx), with the number answered and the number made.
func (m *Monitor) Notify(ctx context.Context, a *nsm.StatChge, peerIP string) (answered, made int) {
	type call struct {
		id   nsm.MyID
		priv [nsm.PrivSize]byte
	}
	var calls []call
	m.mu.Lock()
	for id, e := range m.mon {
		if e.seen == a.State || !(strings.EqualFold(id.MonName, a.MonName) || peerIP != "" && sameHost(id.MonName, peerIP)) {
			continue
		}
		e.seen = a.State
		calls = append(calls, call{id.MyID, e.priv})
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := nlm.SMStatus{MonName: a.MonName, State: a.State, Priv: c.priv}
			if m.callBack(ctx, c.id, &st) == nil {
				mu.Lock()
				answered++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered, len(calls)
}

// sameHost reports whether the host name name is the address ip (both
// parsed when they are addresses, so that "::ffff:10.0.0.1" is
// "10.0.0.1").
func sameHost(name, ip string) bool {
	a, err1 := netip.ParseAddr(name)
	b, err2 := netip.ParseAddr(ip)
	if err1 != nil || err2 != nil {
		return name == ip
	}
	return a.Unmap() == b.Unmap()
}

// isLocal reports whether addr is 127.0.0.1 or ::1 (an IPv4-mapped
// 127.0.0.1 too), and whether its port is a reserved one (below 1024).
func isLocal(addr net.Addr) (local, reserved bool) {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		return false, false
	}
	ip := ap.Addr().Unmap()
	local = ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()
	return local, ap.Port() < 1024
}
