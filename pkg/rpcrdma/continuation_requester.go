package rpcrdma

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The requester's side of message continuation (continuation.go): a call
// sent as RDMA2_CALL_MIDDLE Sends and a final RDMA2_CALL_INLINE, and the
// middles of a continued reply received.

// reserveSendsLocked takes n more version 2 Sends under the responder's
// limit, if it allows them now.
func (c *Client) reserveSendsLocked(n int) bool {
	if int32(c.limit-c.sent) < int32(n) {
		return false
	}
	c.sent += uint32(n)
	return true
}

// contBuffers readies the slot's Sends of one continued call or
// transmission group: sends work requests and SGEs in s.contWRs and
// s.contSGEs, and the registered region (sends x the inline threshold)
// their bytes are built in, returned.
func (s *slot) contBuffers(sends int) ([]byte, error) {
	if err := s.ensure(&s.contMR, sends*s.c.inline.Send, 0); err != nil {
		return nil, err
	}
	if cap(s.contWRs) < sends {
		s.contWRs, s.contSGEs = make([]verbs.SendWR, sends), make([]verbs.SGE, sends)
	}
	s.contWRs, s.contSGEs = s.contWRs[:sends], s.contSGEs[:sends]
	return s.contMR.Bytes(), nil
}

// sendContinued sends the call of slot s, whose final header h (an
// RDMA2_CALL_INLINE with the reply's chunks) is built, as sends Sends
// (contPlan): the Payload stream is laid out in the slot's continuation
// region, each part behind its header, and the Sends are posted
// together under sendMu so that no other message comes between them
// (the draft's section 4.1). The responder's credits for the sends-1
// extra Sends were reserved.
func (s *slot) sendContinued(m *sunrpc.Message, h *Header, sends, mid int) error {
	c := s.c
	in := c.inline.Send
	s.stream = m.AppendTo(s.stream[:0])
	region, err := s.contBuffers(sends)
	if err != nil {
		return err
	}
	rest := s.stream
	for i := range sends {
		buf := region[i*in : i*in : (i+1)*in]
		var b []byte
		var err error
		if i < sends-1 {
			// Full parts, but never the whole rest: the final part is
			// not empty, and fits behind its header (contPlan).
			part := rest[:min(mid, (len(rest)-4)&^3)]
			rest = rest[len(part):]
			mh := Header{XID: h.XID, Vers: Version2, Credits: c.advertised(), Header2: Header2{HType: HTypeCallMiddle, Remaining: uint32(len(rest))}}
			if b, err = mh.Encode(buf); err == nil {
				b = append(b, part...)
			}
		} else {
			h.Credits = c.advertised()
			if b, err = h.Encode(buf); err == nil {
				b = append(b, rest...)
			}
		}
		if err != nil {
			return err
		}
		if len(b) > in {
			return fmt.Errorf("%w: continued call fragment of %d bytes exceeds the inline threshold %d", ErrInvalid, len(b), in)
		}
		s.contSGEs[i] = s.contMR.SGE(i*in, len(b))
		s.contWRs[i] = verbs.SendWR{ID: wrSend | uint64(s.idx), Opcode: verbs.WRSend, SGL: s.contSGEs[i : i+1 : i+1]}
	}
	c.m.continued.Add(1)
	c.m.inlineBytes.Add(uint64(len(s.stream)))
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	s.posted = true
	for i := range s.contWRs {
		if err := c.qp.PostSend(&s.contWRs[i]); err != nil {
			return err
		}
	}
	return nil
}

// replyMiddle takes an RDMA2_REPLY_MIDDLE (in the completion goroutine,
// so in arrival order): its part is appended to the reassembly of its
// call's reply, whose slot keeps waiting, and its receive is reposted. A
// part whose rdma_remaining does not follow the previous one's marks the
// reply bad (ErrCont when it completes). It reports whether msg was such
// a message.
func (c *Client) replyMiddle(msg []byte) bool {
	if len(msg) < Middle2Len || HType(be.Uint32(msg[12:])) != HTypeReplyMiddle || be.Uint32(msg[4:]) != Version2 {
		return false
	}
	xid, rem, part := be.Uint32(msg), be.Uint32(msg[PrefixLen:]), msg[Middle2Len:]
	c.mu.Lock()
	si, ok := c.byXID[xid]
	c.mu.Unlock()
	if !ok {
		c.m.unmatched.Add(1)
		return true
	}
	s := &c.slots[si]
	if !s.contActive {
		s.contActive, s.asm = true, s.asm[:0]
	} else if uint64(rem)+uint64(len(part)) != uint64(s.asmRem) {
		s.asmRem = ^uint32(0) // never matches: the reply fails with ErrCont
		return true
	}
	if len(s.asm)+len(part) > MaxContinuation*c.opts.Inline {
		s.asmRem = ^uint32(0)
		return true
	}
	s.asm = append(s.asm, part...)
	s.asmRem = rem
	return true
}

// endContinued completes the reassembly of slot s's reply with its
// final message msg, decoded into s.rep: an RDMA2_REPLY_INLINE whose
// part is what the last RDMA2_REPLY_MIDDLE said remained.
func (s *slot) endContinued(msg []byte) {
	s.contActive = false
	if s.decodeErr != nil {
		return
	}
	if s.rep.HType != HTypeReplyInline || uint64(len(msg)-s.hdrLen) != uint64(s.asmRem) {
		s.decodeErr = fmt.Errorf("%w: %v ends a continued reply with %d bytes, %d expected", ErrCont, s.rep.HType, len(msg)-s.hdrLen, s.asmRem)
		return
	}
	s.asm = append(s.asm, msg[s.hdrLen:]...)
	s.assembled = true
}
