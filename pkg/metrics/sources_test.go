package metrics

import (
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// The tests run real RPC-over-RDMA endpoints and a real export server;
// these read their counters as the binary's wiring does
// (internal/metricsource, which imports this package and so cannot be
// imported by its tests).

func transportStats(m rpcrdma.Metrics) TransportStats {
	s := TransportStats{
		Connections:        m.Connections,
		Version:            m.Version,
		Version1Fallbacks:  m.Version1Fallbacks,
		Calls:              m.Calls,
		Replies:            m.Replies,
		Retransmits:        m.Retransmits,
		UnmatchedReplies:   m.UnmatchedReplies,
		BadReplies:         m.BadReplies,
		CreditsGranted:     m.CreditsGranted,
		CreditsInUse:       m.CreditsInUse,
		InlineMsgs:         m.InlineMsgs,
		ReadChunks:         m.ReadChunks,
		PositionZeroChunks: m.PositionZeroChunks,
		WriteChunks:        m.WriteChunks,
		ReplyChunks:        m.ReplyChunks,
		InlineBytes:        m.InlineBytes,
		ReadChunkBytes:     m.ReadChunkBytes,
		WriteChunkBytes:    m.WriteChunkBytes,
		ReplyChunkBytes:    m.ReplyChunkBytes,
		ErrVers:            m.ErrVers,
		ErrChunk:           m.ErrChunk,
		Grants:             m.Grants,
		SendWithInvalidate: m.SendWithInvalidate,
		Registrations:      m.Registrations,
		RegisteredBytes:    m.RegisteredBytes,
		ReplyReadChunks:    m.ReplyReadChunks,
		ReplyReadBytes:     m.ReplyReadBytes,
		PullDone:           m.PullDone,
		PullDoneDropped:    m.PullDoneDropped,
		ReadChunkTimeouts:  m.ReadChunkTimeouts,
		SendDDPMsgs:        m.SendDDPMsgs,
		SendDDPBytes:       m.SendDDPBytes,
		XmitErrors:         m.XmitErrors,
		Errors2:            map[string]uint64{},
	}
	for code, n := range m.Errors2 {
		s.Errors2[code.String()] = n
	}
	return s
}

func connections(cs []rpcrdma.ConnInfo) []Connection {
	out := make([]Connection, len(cs))
	for i, c := range cs {
		out[i] = Connection{Machine: c.Machine, Peer: c.Peer, Version: c.Version, Target: c.Target, Named: c.Named,
			Grant: c.Grant, Posted: c.Posted, InProcess: c.InProcess}
	}
	return out
}

func drcStats(d nfsserver.DRCStats) DRCStats {
	return DRCStats{Hits: d.Hits, InProgress: d.InProgress, Misses: d.Misses, Evictions: d.Evictions,
		Expired: d.Expired, Entries: d.Entries, Bytes: d.Bytes, Pending: d.Pending}
}
