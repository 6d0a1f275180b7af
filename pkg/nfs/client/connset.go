package client

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// MaxNConnect bounds Options.NConnect: the bound of the nconnect mount
// option, 16 (Linux NFS_MAX_CONNECTIONS, nfs(5) nconnect).
const MaxNConnect = mountopts.MaxNConnect

// connSet is the NFS connections of a mount (nfs(5) nconnect): n
// sunrpc.Clients dialing the same NFS service, each with its own
// transport, reconnecting on its own. Calls are spread round-robin over
// the connections, one pick per call, as Linux's xprt switch does
// (rpc_task_get_next_xprt, xprt_iter_roundrobin); a connection known to
// be down (its transport ended and no new one is up yet) is skipped while
// another one is up, so that new calls flow while it reconnects, except
// for one call every probeInterval that goes to it and so redials it
// (sunrpc.Client dials when a call needs a transport). A call
// stays on the connection it was given: after a lost connection it is
// retransmitted with the same XID on that connection's next transport
// (sunrpc.RetryPolicy), as Linux keeps a task on its xprt.
type connSet struct {
	conns []*conn
	next  atomic.Uint32
}

// probeInterval is how often a call is sent to a connection that is
// down, so that it reconnects.
const probeInterval = 500 * time.Millisecond

// conn is one connection of a connSet.
type conn struct {
	rpc *sunrpc.Client
	// down: the last transport this connection dialed has ended and no
	// new one is established yet. False before the first dial.
	down atomic.Bool
	// probeAt is when (Unix nanoseconds) the next call may go to this
	// connection while it is down.
	probeAt atomic.Int64
}

// newConnSet builds n (at least 1) clients over dial with opts.
func newConnSet(n int, dial sunrpc.DialFunc, opts sunrpc.ClientOptions) (*connSet, error) {
	n = min(max(n, 1), MaxNConnect)
	s := &connSet{conns: make([]*conn, n)}
	if n > 1 {
		// one XID sequence for the set: the server's duplicate request
		// cache, which keys by client address without the port, never
		// takes a call on one connection for another's
		opts.XIDs = sunrpc.NewXIDCounter()
	}
	for i := range s.conns {
		c := &conn{}
		rpc, err := sunrpc.NewClient(c.watch(dial), opts)
		if err != nil {
			return nil, err
		}
		c.rpc = rpc
		s.conns[i] = c
	}
	return s, nil
}

// singleConnSet wraps an existing client (New).
func singleConnSet(rpc *sunrpc.Client) *connSet {
	return &connSet{conns: []*conn{{rpc: rpc}}}
}

// watch wraps dial so that c.down follows the transport it returns.
func (c *conn) watch(dial sunrpc.DialFunc) sunrpc.DialFunc {
	return func(ctx context.Context) (sunrpc.ClientTransport, error) {
		t, err := dial(ctx)
		if err != nil {
			c.markDown()
			return nil, err
		}
		c.down.Store(false)
		go func() {
			<-t.Done()
			c.markDown()
		}()
		return t, nil
	}
}

// markDown records that c has no transport; the first probe comes
// probeInterval later.
func (c *conn) markDown() {
	c.probeAt.Store(time.Now().Add(probeInterval).UnixNano())
	c.down.Store(true)
}

// usable reports whether a call may go to c now: c is up, or it is down
// and due for a probe (which this call then is).
func (c *conn) usable() bool {
	if !c.down.Load() {
		return true
	}
	now := time.Now().UnixNano()
	at := c.probeAt.Load()
	return now >= at && c.probeAt.CompareAndSwap(at, now+int64(probeInterval))
}

// pick returns the client of the next call: the next connection in
// round-robin order that is usable, or the next one if none is.
func (s *connSet) pick() *sunrpc.Client {
	if len(s.conns) == 1 {
		return s.conns[0].rpc
	}
	n := uint32(len(s.conns))
	i := s.next.Add(1) - 1
	for k := range n {
		if c := s.conns[(i+k)%n]; c.usable() {
			return c.rpc
		}
	}
	return s.conns[i%n].rpc
}

// stats sums the counters of the connections.
func (s *connSet) stats() sunrpc.ClientStats {
	var t sunrpc.ClientStats
	for _, c := range s.conns {
		st := c.rpc.Stats()
		t.Calls += st.Calls
		t.Retransmits += st.Retransmits
		t.Reconnects += st.Reconnects
	}
	return t
}

// close closes every connection and returns the errors joined.
func (s *connSet) close() error {
	var err error
	for _, c := range s.conns {
		err = errors.Join(err, c.rpc.Close())
	}
	return err
}
