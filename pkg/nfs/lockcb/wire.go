// Package lockcb is a node's lock callback service: the procedures a lock
// server calls on a client host, NLM v4 GRANTED and GRANTED_MSG (X/Open
// XNFS chapter 10, section 14.3) and NSM v1 SM_NOTIFY (chapter 11), served
// once per node and registered with the node's rpcbind, as Linux has one
// lockd and one rpc.statd per host. Each callback is passed on to the
// mount process it concerns over a local unix socket:
//
//   - A mount process attaches (Attach) and says, in a Hello, the tag its
//     NLM lock owners carry (the oh of each lock is "svid@host/TAG") and
//     the servers it holds locks on.
//   - GRANTED and GRANTED_MSG go to the process whose tag ends the oh of
//     the lock named, and GRANTED is answered with what that process says
//     (NLM4_GRANTED when a blocked LOCK took the lock, NLM4_DENIED when
//     none was waiting; no process: NLM4_DENIED, as lockd answers).
//   - SM_NOTIFY goes to every process whose servers include the mon_name
//     or the caller's address.
//   - The NSM program is also the node's status monitor for its local
//     lock managers (the kernel's lockd for host NFS mounts, an
//     NFS-Ganesha NLM), which look for it in rpcbind: SM_STAT, SM_MON,
//     SM_UNMON, SM_UNMON_ALL and SM_SIMU_CRASH from the node itself, and
//     the callbacks of their monitors on SM_NOTIFY (package statmon).
//     Its state number is not kept on disk (nsmstate.Volatile), nor are
//     the monitors.
//   - A lock server of the node that holds the NLM and NSM registrations
//     in the node's rpcbind (an export server on the host network)
//     relays the client procedures it receives here (Relay).
//
// Wire protocol on the unix socket (SOCK_SEQPACKET): each packet is one
// Message in XDR (RFC 4506), at most MaxMessage bytes: a kind, then its
// fields. A process may send Hello again to update it; a Call is answered
// by a Reply with its ID on the same connection.
package lockcb

import (
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Kind is a Message's type.
type Kind uint32

// Message kinds.
const (
	// KindHello: a mount process's tag and servers (process to service).
	KindHello Kind = 1
	// KindCall: one callback to run (service to process, relay to
	// service).
	KindCall Kind = 2
	// KindReply: the outcome of a Call (either way back).
	KindReply Kind = 3
)

// Limits of a Message.
const (
	// MaxMessage is the largest packet, in bytes.
	MaxMessage = 8 << 10
	// MaxTag is the longest tag, in bytes.
	MaxTag = 64
	// MaxServers is the most servers a Hello names.
	MaxServers = 64
	// MaxServer is the longest server name or address, in bytes.
	MaxServer = 255
	// MaxPeer is the longest caller address of a Call, in bytes.
	MaxPeer = 64
	// MaxArgs is the longest arguments of a Call, in bytes (nlm4_testargs
	// with its netobjs and caller_name fit).
	MaxArgs = 4096
)

// ErrBadMessage wraps a packet that does not decode.
var ErrBadMessage = errors.New("lockcb: bad message")

// Message is one packet. Which fields are used depends on Kind:
//
//	Hello: Tag, Servers
//	Call:  ID, Prog, Proc, Peer, Args
//	Reply: ID, Stat
type Message struct {
	Kind Kind
	// Tag is what ends the oh of the process's lock owners, after the
	// last "/".
	Tag string
	// Servers are the names and addresses of the servers the process
	// holds locks on.
	Servers []string
	// ID matches a Reply to its Call (unique per connection and sender).
	ID uint32
	// Prog and Proc are the RPC program and procedure of the callback
	// (nlm.Program with nlm.ProcGranted or nlm.ProcGrantedMsg;
	// nsm.Program with nsm.ProcNotify).
	Prog, Proc uint32
	// Peer is the caller's address, "IP:port" (the lock server).
	Peer string
	// Args are the call's XDR arguments (nlm4_testargs, stat_chge).
	Args []byte
	// Stat is the outcome: an nlm4_stats for GRANTED and GRANTED_MSG;
	// for SM_NOTIFY 0.
	Stat uint32
}

// Marshal returns m's encoding.
func (m *Message) Marshal() []byte {
	e := xdr.NewEncoder(make([]byte, 0, 64+len(m.Args)))
	e.Uint32(uint32(m.Kind))
	switch m.Kind {
	case KindHello:
		e.String(m.Tag)
		e.Uint32(uint32(len(m.Servers)))
		for _, s := range m.Servers {
			e.String(s)
		}
	case KindCall:
		e.Uint32(m.ID)
		e.Uint32(m.Prog)
		e.Uint32(m.Proc)
		e.String(m.Peer)
		e.Opaque(m.Args)
	case KindReply:
		e.Uint32(m.ID)
		e.Uint32(m.Stat)
	}
	return e.Bytes()
}

// Check reports whether m is within the limits, so that it can be sent.
func (m *Message) Check() error {
	switch m.Kind {
	case KindHello:
		if len(m.Tag) > MaxTag || len(m.Servers) > MaxServers {
			return fmt.Errorf("%w: hello over the limits", ErrBadMessage)
		}
		for _, s := range m.Servers {
			if len(s) > MaxServer {
				return fmt.Errorf("%w: server name of %d bytes", ErrBadMessage, len(s))
			}
		}
	case KindCall:
		if len(m.Peer) > MaxPeer || len(m.Args) > MaxArgs {
			return fmt.Errorf("%w: call over the limits", ErrBadMessage)
		}
	case KindReply:
	default:
		return fmt.Errorf("%w: kind %d", ErrBadMessage, m.Kind)
	}
	return nil
}

// Decode decodes one packet. Errors wrap ErrBadMessage: an unknown kind,
// a field past its limit, a short packet, or bytes after the message.
// Args alias b.
func Decode(b []byte) (Message, error) {
	if len(b) > MaxMessage {
		return Message{}, fmt.Errorf("%w: %d bytes", ErrBadMessage, len(b))
	}
	d := xdr.NewDecoder(b)
	m := Message{Kind: Kind(d.Uint32())}
	switch m.Kind {
	case KindHello:
		m.Tag = d.String(MaxTag)
		n := d.Uint32()
		if n > MaxServers {
			return Message{}, fmt.Errorf("%w: %d servers", ErrBadMessage, n)
		}
		for range n {
			if d.Err() != nil {
				break
			}
			m.Servers = append(m.Servers, d.String(MaxServer))
		}
	case KindCall:
		m.ID = d.Uint32()
		m.Prog = d.Uint32()
		m.Proc = d.Uint32()
		m.Peer = d.String(MaxPeer)
		m.Args = d.Opaque(MaxArgs)
	case KindReply:
		m.ID = d.Uint32()
		m.Stat = d.Uint32()
	default:
		if d.Err() == nil {
			return Message{}, fmt.Errorf("%w: kind %d", ErrBadMessage, m.Kind)
		}
	}
	if err := d.Err(); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if d.Remaining() != 0 {
		return Message{}, fmt.Errorf("%w: %d bytes after the message", ErrBadMessage, d.Remaining())
	}
	return m, nil
}
