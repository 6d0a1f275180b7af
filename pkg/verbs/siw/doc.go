// Package siw is the software iWARP verbs provider: RDMAP (RFC 5040) over
// DDP (RFC 5041) over MPA (RFC 5044, with the RFC 6581 enhanced connection
// setup) over an ordinary TCP connection, in pure Go, wire-compatible with
// Linux soft-iWARP (siw) and hardware iWARP NICs.
//
// Placement is honest RDMA: tagged data (RDMA Write, Read Response) is read
// from the socket straight into the target memory region at the offset its
// STag and tagged offset name, after the STag, bounds and access rights were
// checked; an RDMA Read is answered by this stack's transmit path from the
// registered source region without involving the consumer. A protocol
// violation by the peer is answered with a Terminate message carrying the
// RFC 5040 layer/type/code and moves the queue pair to the error state.
//
// MPA framing (ULPDU length, pad, CRC32c, markers) is done by an FPDU
// writer and reader (fpduwriter.go, fpdureader.go) that know nothing of
// queue pairs and are tested alone; the queue pair's transmit path does
// DDP segmentation into FPDUs through the writer, its receive path DDP
// placement from what the reader returns.
//
// Wire facts honoured for Linux siw (checked against a Linux 6.1 kernel):
// CRC32c is written little-endian; MPA revision 2 with the enhanced IRD/ORD
// block and peer-to-peer mode; the ready-to-receive message (RTR) is a
// zero-length RDMA Write (STag 1, TO 0); no byte follows an MPA request or
// reply until the peer answered; a Terminate's control word is decoded in
// both the RFC 5040 and the siw (little-endian bitfield) layouts.
package siw
