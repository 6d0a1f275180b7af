package rpcrdma

import "github.com/nfsrdma/nfsrdma-csi/pkg/verbs"

// Memory registration for both roles. Each connection registers its send
// and receive buffer pools once; a requester also registers the caller's
// memory for each call that moves DDP-eligible data by chunks (an RDMA Read
// source for a Read chunk, an RDMA Write sink for a Write chunk, RFC 8166
// section 3.4) and keeps slot-owned regions for Position-Zero Read chunks
// and Reply chunks, re-keyed per call; a responder keeps per-slot sinks of
// Read chunks and sources of Reply chunks. Registered bytes are counted in
// the metrics (Metrics.RegisteredBytes).

// register registers b with pd for acc (verbs.PD.RegMR) and counts it in m.
func register(m *metrics, pd verbs.PD, b []byte, acc verbs.Access) (verbs.MR, error) {
	mr, err := pd.RegMR(b, acc)
	if err == nil {
		m.registeredBytes.Add(int64(len(b)))
	}
	return mr, err
}

// deregister closes mr (nil: nothing) and uncounts it in m.
func deregister(m *metrics, mr verbs.MR) {
	if mr != nil {
		m.registeredBytes.Add(-int64(mr.Len()))
		mr.Close()
	}
}

func (c *Client) reg(b []byte, acc verbs.Access) (verbs.MR, error) {
	return register(c.m, c.pd, b, acc)
}

func (c *Client) dereg(mr verbs.MR) { deregister(c.m, mr) }

func (s *Server) reg(pd verbs.PD, b []byte, acc verbs.Access) (verbs.MR, error) {
	return register(&s.m, pd, b, acc)
}

func (s *Server) dereg(mr verbs.MR) { deregister(&s.m, mr) }

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
