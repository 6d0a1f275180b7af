package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Version negotiation (draft-ietf-nfsv4-rpcrdma-version-two section 4.3):
// the requester's first message on a connection is a version 2
// RDMA2_CONNPROP_FINAL carrying its transport properties, well under the
// version 1 default inline threshold of 1024 bytes. A version 2 responder
// answers with its own RDMA2_CONNPROP_FINAL; a version 1 responder (Linux
// knfsd among them) answers RDMA_ERROR ERR_VERS with the range it
// supports (RFC 8166 section 4.5.1; its encoding is RDMA2_ERROR with
// RDMA2_ERR_VERS), and the connection continues in version 1. The answer,
// or its absence within HandshakeTimeout, is remembered per responder
// address in a VersionCache, so that a reconnection goes straight to
// version 1 (no negotiation loop, section 4.3.2).

// VersionCache remembers, per responder address ("host:port"), that the
// responder does not speak version 2. It is safe for concurrent use; the
// zero value is ready.
type VersionCache struct {
	mu sync.Mutex
	v1 map[string]time.Time
}

// DefaultVersionCache is the cache of Clients whose options name none.
var DefaultVersionCache = &VersionCache{}

// versionCacheTTL is how long a version 1 answer is trusted: a responder
// upgraded in place is tried again in version 2 after it.
const versionCacheTTL = time.Hour

// Version1Only reports whether addr answered version 2 with ERR_VERS (or
// not at all) within the last hour.
func (vc *VersionCache) Version1Only(addr string) bool {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	t, ok := vc.v1[addr]
	return ok && time.Since(t) < versionCacheTTL
}

// SetVersion1Only records that addr speaks only version 1.
func (vc *VersionCache) SetVersion1Only(addr string) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.v1 == nil {
		vc.v1 = map[string]time.Time{}
	}
	vc.v1[addr] = time.Now()
}

// Forget drops what is known of addr.
func (vc *VersionCache) Forget(addr string) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	delete(vc.v1, addr)
}

// ErrNoVersion2 is returned by Dial when the responder did not answer the
// version 2 negotiation message within ClientOptions.HandshakeTimeout: the
// address is remembered as version 1 only (section 4.3.2: a client can
// assume so when the initial message is lost), and the next Dial uses
// version 1.
var ErrNoVersion2 = errors.New("rpcrdma: no answer to the version 2 negotiation; version 1 from now on")

// localProperties are the transport properties we advertise (section
// 5.2): our send and receive buffer size, the largest segment we register
// (our planners register one segment per chunk, of at most the largest
// RPC message), the segments our decoder accepts in a header, and no
// reverse-direction support (NFSv3 needs no backchannel).
func localProperties(inline int, lim Limits) Properties {
	l := lim.orDefault()
	return Properties{SendSize: uint32(inline), RecvSize: uint32(inline), MaxSegSize: MaxMessageLen,
		MaxSegs: uint32(l.MaxChunkSegments), Reverse: ReverseNone}
}

// inline2 returns the inline thresholds of a version 2 connection (the
// draft, sections 4.2.2 and 5.2): what we send is bounded by our send
// size and the peer's receive buffers, what we receive by our receive
// buffers and the peer's send size. Sizes below the version 1 default
// (1024) or above MaxInlineSize are refused as RDMA2_ERR_BAD_PROPVAL: no
// header fits below, and our buffers are never larger.
func inline2(local, peer Properties) (send, recv int, err error) {
	for _, v := range []uint32{peer.SendSize, peer.RecvSize} {
		if v < DefaultInline || v > 1<<30 {
			return 0, 0, &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("peer inline size %d", v)}
		}
	}
	return int(min(local.SendSize, peer.RecvSize)), int(min(local.RecvSize, peer.SendSize)), nil
}

// negotiate runs the requester's side of section 4.3 on a connection whose
// receives are posted and whose completion loop has not started: it sends
// RDMA2_CONNPROP_FINAL from slot 0's send buffer and waits for the first
// message back. It sets c.vers (1 or 2), c.inline and, for version 2,
// c.limit and c.sent; for version 1 the credit window from the ERR_VERS.
func (c *Client) negotiate(ctx context.Context, addr string, local PrivateData) error {
	props := localProperties(c.opts.Inline, c.lim)
	var pbuf [20]byte
	var rbuf [4]byte
	xid := rand.Uint32() | 1
	pl := props.AppendProps(nil, &pbuf)
	if f := c.rprcLocal(); f != 0 {
		pl = appendRPRCProp(pl, f, &rbuf)
	}
	pl = c.appendSDDPProp(pl)
	h := Header{XID: xid, Vers: Version2, Credits: c.advertised(), Header2: Header2{HType: HTypeConnPropFinal, Props: pl}}
	b, err := h.Encode(c.sendMR.Bytes()[:0:DefaultInline])
	if err != nil {
		return err
	}
	c.sent = 1
	sge := []verbs.SGE{c.sendMR.SGE(0, len(b))}
	if err := c.qp.PostSend(&verbs.SendWR{ID: wrSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sge}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.HandshakeTimeout)
	defer cancel()
	var wc [4]verbs.WC
	for {
		n := c.cq.Poll(wc[:])
		if n == 0 {
			if err := c.cq.Wait(ctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) && c.qp.Err() == nil {
					c.opts.Versions.SetVersion1Only(addr)
					return ErrNoVersion2
				}
				return err
			}
			continue
		}
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				return fmt.Errorf("rpcrdma: version negotiation: %v %v: %w", w.Opcode, w.Status, w.Err)
			}
			if w.ID&wrKindMask != wrRecv {
				continue
			}
			idx := int(w.ID &^ wrKindMask)
			msg := c.recv.buf(c.recvMR, idx)[:w.ByteLen]
			done, err := c.negotiated(addr, xid, msg, local, props)
			if err == nil {
				err = c.postRecv(idx)
			}
			if done || err != nil {
				return err
			}
		}
	}
}

// negotiated handles a message received in answer to the negotiation
// message xid. done is false for a message that does not end it (an
// RDMA2_CONNPROP_MIDDLE, or one that is silently discarded).
func (c *Client) negotiated(addr string, xid uint32, msg []byte, local PrivateData, props Properties) (done bool, err error) {
	if len(msg) < PrefixLen {
		return false, nil
	}
	vers, kind := be.Uint32(msg[4:]), be.Uint32(msg[12:])
	if kind == uint32(ProcError) && be.Uint32(msg) == xid && len(msg) >= ErrorVersLen && be.Uint32(msg[16:]) == uint32(ErrcodeVers) {
		// ERR_VERS (RFC 8166 section 4.5.1) or RDMA2_ERR_VERS: the same
		// words. The responder echoes our rdma_vers (2).
		lo, hi := be.Uint32(msg[20:]), be.Uint32(msg[24:])
		if lo > Version || hi < Version {
			return true, fmt.Errorf("%w: the responder speaks versions %d..%d", ErrVers, lo, hi)
		}
		c.opts.Versions.SetVersion1Only(addr)
		c.vers = Version
		c.sent = 0
		c.inline = inlineFor(local, c.peer, 1)
		c.m.fallbacks.Add(1)
		c.m.errVers.Add(1)
		c.grant(be.Uint32(msg[8:]))
		c.opts.Logger.Info("rpcrdma: responder speaks version 1 only", "peer", addr, "versions", fmt.Sprintf("%d..%d", lo, hi))
		return true, nil
	}
	if vers != Version2 {
		return false, nil
	}
	var h Header
	if _, err := h.Decode2(msg, &c.lim); err != nil {
		return false, nil // silently discarded, as any bad reply
	}
	switch h.HType {
	case HTypeError:
		if h.XID == xid {
			return true, &ErrorReply{XID: xid, Vers: Version2, Code2: h.Err.Code, Err2: h.Err}
		}
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		for _, p := range h.Props { // their Data is in a receive buffer, reposted
			c.peerProps = append(c.peerProps, Prop{Which: p.Which, Data: bytes.Clone(p.Data)})
		}
		if h.HType == HTypeConnPropMiddle {
			return false, nil
		}
		peer, err := ParseProperties(c.peerProps)
		if err != nil {
			return true, err
		}
		rprc, err := parseRPRC(c.peerProps)
		if err != nil {
			return true, err
		}
		send, recv, err := inline2(props, peer)
		if err != nil {
			return true, err
		}
		c.props = peer
		c.props.HostAuth = nil
		rbs, hasRBS, err := parseRBStruct(c.peerProps)
		if err != nil {
			return true, err
		}
		c.peerRBS, c.peerHasRBS = rbs, hasRBS
		c.peerProps = nil
		c.vers = Version2
		c.inline = Inline{Send: send, Recv: recv, MaxSegs: 1, Vers: Version2}
		if err := c.setupRPRC(rprc); err != nil {
			return true, err
		}
		if err := c.setupSDDP(c.props.RecvSize); err != nil {
			return true, err
		}
		c.grant(h.Credits)
		return true, nil
	case HTypeGrant:
		c.grant(h.Credits)
	}
	return false, nil
}
