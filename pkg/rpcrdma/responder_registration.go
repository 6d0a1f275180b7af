package rpcrdma

import "github.com/nfsrdma/nfsrdma-csi/pkg/verbs"

// The responder's memory registration (registration.go): its buffer
// pools and per-slot chunk sinks and sources, counted in the server's
// metrics.

func (s *Server) reg(pd verbs.PD, b []byte, acc verbs.Access) (verbs.MR, error) {
	return register(&s.m, pd, b, acc)
}

func (s *Server) dereg(mr verbs.MR) { deregister(&s.m, mr) }
