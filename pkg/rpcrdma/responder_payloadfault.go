package rpcrdma

import (
	"runtime/debug"
)

// payloadFault is deferred by a reply that copies its DDP-eligible item
// (sunrpc.Message.Payload) into a Send or a chunk: the item may be a
// mapping of a file (the NFS server answers READ from the page cache),
// whose pages past the end of a file that shrank fault (SIGBUS). With
// guardPayload in effect the fault panics instead; payloadFault recovers it
// and closes the connection (the reply is not sent: the client
// retransmits on a new connection and gets the file as it is then). Any
// other panic goes on.
func (sl *srvSlot) payloadFault(old bool) {
	debug.SetPanicOnFault(old)
	r := recover()
	if r == nil {
		return
	}
	f, ok := r.(interface{ Addr() uintptr })
	if !ok {
		panic(r)
	}
	sl.c.s.opts.Logger.Warn("rpcrdma: reply dropped: memory fault reading its payload (a mapped file shrank?); closing the connection", "peer", sl.c.addr, "addr", f.Addr())
	sl.c.qp.Close()
}

// guardPayload turns memory faults of this goroutine into panics (see
// payloadFault) and returns the previous setting.
func guardPayload() bool { return debug.SetPanicOnFault(true) }
