// Package metricsource hands the counters of the packages that keep them
// (rpcrdma, the export server) to the collectors of
// package metrics, as the snapshot types metrics owns. Each function
// returns a function that reads its source when called (at scrape time).
package metricsource

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// Transport reads an RPC-over-RDMA endpoint's counters (rpcrdma.Server.Metrics,
// rpcrdma.Client.Metrics, rpcrdma.ClientMetrics.Metrics) for
// metrics.NewTransportCollector.
func Transport(read func() rpcrdma.Metrics) func() metrics.TransportStats {
	return func() metrics.TransportStats { return TransportStats(read()) }
}

// TransportStats converts one snapshot of rpcrdma counters; RDMA2_ERROR
// codes are named by rpcrdma.Errcode2.String.
func TransportStats(m rpcrdma.Metrics) metrics.TransportStats {
	s := metrics.TransportStats{
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
		SendDDPGroups:      m.SendDDPGroups,
		SendDDPKept:        m.SendDDPKept,
	}
	if len(m.Errors2) > 0 {
		s.Errors2 = make(map[string]uint64, len(m.Errors2))
		for code, n := range m.Errors2 {
			s.Errors2[code.String()] = n
		}
	}
	return s
}

// Connections reads a responder's connections (rpcrdma.Server.Connections,
// the export server's RDMAConnections) for metrics.NewConnectionCollector.
func Connections(read func() []rpcrdma.ConnInfo) func() []metrics.Connection {
	return func() []metrics.Connection {
		cs := read()
		out := make([]metrics.Connection, len(cs))
		for i, c := range cs {
			out[i] = metrics.Connection{Machine: c.Machine, Peer: c.Peer, Version: c.Version, Target: c.Target, Named: c.Named,
				Grant: c.Grant, Posted: c.Posted, InProcess: c.InProcess}
		}
		return out
	}
}

// DRC reads the export server's duplicate request cache counters
// (nfsserver.Server.DRCStats) for metrics.NewDRCCollector.
func DRC(read func() nfsserver.DRCStats) func() metrics.DRCStats {
	return func() metrics.DRCStats {
		d := read()
		return metrics.DRCStats{Hits: d.Hits, InProgress: d.InProgress, Misses: d.Misses, Evictions: d.Evictions,
			Expired: d.Expired, Entries: d.Entries, Bytes: d.Bytes, Pending: d.Pending}
	}
}

// ReadMap reads the counters of the export server's READ mappings
// (nfsserver.Server.ReadMapStats) for metrics.NewReadMapCollector.
func ReadMap(read func() nfsserver.ReadMapStats) func() metrics.ReadMapStats {
	return func() metrics.ReadMapStats {
		r := read()
		return metrics.ReadMapStats{Limit: r.Limit, Mapped: r.Mapped, Windows: r.Windows, Hits: r.Hits, Misses: r.Misses,
			Evictions: r.Evictions, Copied: r.Copied, Faults: r.Faults}
	}
}
