package lockcb

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Relay passes one callback that a lock server of this node received
// (holding the node's NLM and NSM registrations in rpcbind, it is called
// in the node service's place) to the node's service at socket, and
// returns the Stat of its answer (for GRANTED the mount process's
// nlm4_stats). args are the call's XDR arguments, peer the caller's
// address. Errors: the socket's, ctx's, and ErrNotDelivered when no
// process answered.
func Relay(ctx context.Context, socket string, prog, proc uint32, peer string, args []byte) (uint32, error) {
	m := Message{Kind: KindCall, ID: 1, Prog: prog, Proc: proc, Peer: peer, Args: args}
	if err := m.Check(); err != nil {
		return 0, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		return 0, fmt.Errorf("lockcb: relay: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(2 * DefaultAnswerTimeout))
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write(m.Marshal()); err != nil {
		return 0, fmt.Errorf("lockcb: relay: %w", err)
	}
	buf := make([]byte, MaxMessage+1)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("lockcb: relay: %w", err)
		}
		r, err := Decode(buf[:n])
		if err != nil {
			return 0, err
		}
		if r.Kind != KindReply || r.ID != m.ID {
			continue
		}
		if r.Stat == NotDelivered {
			return 0, ErrNotDelivered
		}
		return r.Stat, nil
	}
}
