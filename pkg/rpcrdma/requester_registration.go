package rpcrdma

import "github.com/nfsrdma/nfsrdma-csi/pkg/verbs"

// The requester's memory registration (registration.go): the caller's
// memory registered per call for its chunks, and the slot-owned regions
// of Position-Zero Read chunks and Reply chunks, re-keyed per call.

func (c *Client) reg(b []byte, acc verbs.Access) (verbs.MR, error) {
	return register(c.m, c.pd, b, acc)
}

func (c *Client) dereg(mr verbs.MR) { deregister(c.m, mr) }

func (s *slot) dropCallerRegs() {
	c := s.c
	for _, mr := range []*verbs.MR{&s.payMR, &s.resMR} {
		if *mr != nil {
			c.m.registrations.Add(-1)
			c.dereg(*mr)
			*mr = nil
		}
	}
}

func (s *slot) deregOwned() {
	s.c.dereg(s.longMR)
	s.c.dereg(s.replyMR)
	s.c.dereg(s.contMR)
	s.c.dereg(s.pullMR)
	s.longMR, s.replyMR, s.contMR, s.pullMR = nil, nil, nil, nil
}

func (s *slot) dropRegs() {
	s.dropCallerRegs()
	s.invalidateAsync()
}

// invalidateAsync posts unsignaled local invalidates for the slot-owned
// STags still exposed (ordered before any later work request).
func (s *slot) invalidateAsync() {
	c := s.c
	for _, x := range []struct {
		on *bool
		mr verbs.MR
	}{{&s.longOn, s.longMR}, {&s.replyOn, s.replyMR}} {
		if *x.on {
			*x.on = false
			if x.mr.RKey() != s.invKey {
				s.invWR = verbs.SendWR{ID: wrInv | uint64(s.idx), Opcode: verbs.WRLocalInv, InvalidateKey: x.mr.RKey()}
				_ = c.qp.PostSend(&s.invWR)
			}
		}
	}
}

// ensure makes *mr a slot-owned region of at least n bytes with acc and a
// fresh STag (rotated key).
func (s *slot) ensure(mr *verbs.MR, n int, acc verbs.Access) error {
	c := s.c
	if *mr == nil || (*mr).Len() < n {
		c.dereg(*mr)
		*mr = nil
		m, err := c.reg(make([]byte, n), acc)
		if err != nil {
			return err
		}
		*mr = m
		return nil
	}
	(*mr).Rekey()
	return nil
}
