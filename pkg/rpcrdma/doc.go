// Package rpcrdma implements the wire codec and the pure decision logic of
// RPC-over-RDMA version 1 (RFC 8166) and version 2
// (draft-ietf-nfsv4-rpcrdma-version-two, "the draft"), the transport that
// carries ONC RPC (RFC 5531) and so NFSv3 (RFC 1813, bound by RFC 8267)
// over RDMA.
//
// The codec and planners hold no connection state and perform no I/O:
//
//   - header.go: the transport header (RFC 8166 section 4): Header, Segment,
//     ReadSegment, Header.Encode, Header.Decode with Limits.
//   - header2.go, props.go: version 2 headers (Header.Decode2; Encode of a
//     Header with Vers 2) and transport properties (the draft's sections
//     5, 6 and 8).
//   - errreply.go: the RDMA_ERROR a responder sends for a header it could
//     not decode (RFC 8166 section 4.5).
//   - privdata.go: the RDMA-CM private data of RFC 8797 (magic 0xf6ab0e18)
//     and the negotiation of the inline thresholds.
//   - callplan.go: the requester's choice of chunks for a call and its reply
//     (modelled on Linux xprtrdma rpcrdma_marshal_req).
//   - replyplan.go: the responder's choice of how to return a reply within the
//     chunks the requester provided (modelled on Linux svcrdma), and the
//     checks a requester makes on the chunks a reply returns.
//
// The transport, over any verbs.Device (pkg/verbs), uses them:
//
//   - requester.go: Dial returns a Client, a sunrpc.ClientTransport: RFC
//     8797 private data, credit window (RFC 8166 section 3.3.1), pools of
//     pre-registered send and receive buffers (Credits x Inline bytes),
//     per-call registration of Read, Write and Reply chunks, invalidated
//     before RoundTrip returns (or remotely, by Send With Invalidate).
//   - responder.go: Listen returns a Server; Serve dispatches calls to a
//     sunrpc.Dispatcher: receives posted before credits are granted, Read
//     chunks pulled within the negotiated ORD, replies pushed into Write and
//     Reply chunks, RDMA_ERROR for bad headers.
//   - registration.go: memory registration for both roles (buffer pools,
//     the caller's memory per call, slot-owned chunk regions).
//   - grants.go: the responder's credit grants (a budget shared max-min
//     fair among connections, grants per AUTH_SYS machine name).
//   - metrics.go: Metrics (calls, credits, chunks and bytes by kind, RDMA
//     errors, registered memory) and ErrorReply, the RDMA_ERROR a call got.
//
// In the steady state, with the siw provider, a call allocates nothing,
// on the requester or the responder side: per-call state lives in
// per-credit slots, and the chunk memory registered per call reuses the
// provider's region objects (a siw MR is handed out again after Close,
// under a new STag). With the ibverbs provider RegMR allocates, so calls
// that register memory per call (Read and Write chunks) do.
//
// All sizes are in bytes. Decoders never panic, never trust a length or a
// count before checking it against the bytes present and the configured
// Limits, and reuse the caller's slices so that the steady state does not
// allocate.
//
// # Version 2
//
// Our requester and responder speak version 2 to each other and version 1
// to everyone else (negotiate.go, responder2.go, continuation.go). Version
// 2 shares chunks, registration, the planners and the per-machine credit
// grants with version 1. What the draft leaves open was decided so:
//
//   - Negotiation (section 4.3). The requester's first message is an
//     RDMA2_CONNPROP_FINAL with its properties (about 80 bytes, under the
//     version 1 default of 1024), under a random nonzero rdma_xid, which
//     the responder's own RDMA2_CONNPROP_FINAL echoes. A version 1
//     responder answers RDMA_ERROR ERR_VERS (Linux knfsd does; its words
//     are those of RDMA2_ERROR RDMA2_ERR_VERS): the connection goes on in
//     version 1 and the address is remembered in a VersionCache for an
//     hour, so reconnections do not negotiate again. No answer within
//     ClientOptions.HandshakeTimeout (5 s) is taken as version 1 too (Dial
//     fails with ErrNoVersion2; the next Dial uses version 1). RFC 8797
//     private data is sent on every connection. The responder speaks the
//     version of the first message it receives of a version it serves; a
//     version 1 message on a version 2 connection is answered
//     RDMA2_ERR_VERS_MISMATCH, a version 2 message on a version 1
//     connection ERR_VERS.
//   - The header prefix is 16 bytes (rpcrdma_common); section 7 says 20
//     octets, but an RDMA2_GRANT is 16. Shorter messages are silently
//     discarded. The *_EXTERNAL and *_MIDDLE descriptions that say "Reply"
//     for a Call, or "Call" for a Reply, are read as their own direction.
//   - Properties (section 5). Each uint32 property must be exactly 4
//     bytes, a reverse-direction level at most RDMA2_RVRSDIR_GENL, sizes at
//     least 1024: otherwise RDMA2_ERR_BAD_PROPVAL and none applied. Nonzero
//     XDR padding or more than MaxProps properties is RDMA2_ERR_BAD_XDR.
//     Unknown properties are skipped, so extensions add properties without
//     a new header type. We announce our buffer size as both sizes, our
//     decoder's segments per chunk as RDMA2_PROPID_RCSIZ, MaxMessageLen as
//     the segment size and no reverse-direction support; the Host Auth
//     Message is carried, not interpreted. Our send threshold is the
//     smaller of our send size and the peer's RDMA2_PROPID_RBSIZ, our
//     receive threshold the smaller of our buffers and its
//     RDMA2_PROPID_SBSIZ. A CONNPROP after the FINAL is
//     RDMA2_ERR_INVAL_CONT.
//   - Credits (section 4.2.1). rdma_credit is the messages received plus
//     the receives advertised (the draft says messages sent, which differs
//     as soon as a message is continued): receives ever posted, less one
//     kept posted for an RDMA2_GRANT. A sender posts while its Sends stay
//     under the last rdma_credit received (modulo 2^32); the first message
//     goes under the initial credit of 1. The responder posts its grant
//     (grants.go) plus that one receive, advertises posts -
//     max(1, held - grant) (so a lower grant shrinks the requester's
//     window at once, as in version 1), and closes a connection whose
//     requester sends past the highest credit it advertised, as a version
//     1 requester past its grant finds no receive. Until the first call
//     (the RDMA2_CONNPROP exchange) a connection is granted 1, since its
//     AUTH_SYS machine is not known yet. RDMA2_GRANT is understood by the
//     requester; the responder sends one (rdma_xid 0) when a connection's
//     grant rises, so a requester waiting for credits need not wait for a
//     reply, and ignores the requester's (our replies answer calls that
//     have a receive waiting).
//   - Continuation (section 6.6.2). A call too large for one Send that is
//     not reduced enough by a Read chunk goes as RDMA2_CALL_MIDDLE parts
//     and a final RDMA2_CALL_INLINE when it takes at most MaxContinuation
//     (16) Sends and the responder's credits cover them now; otherwise in
//     a Call chunk, as version 1 (ClientOptions.NoContinuation forces
//     that). Parts are multiples of 4 bytes; the final part is never
//     empty; the Sends of one message are posted together, so no other
//     message comes between them. The responder reassembles in completion
//     order, reposting each part's receive at once; a part of another
//     call, an rdma_remaining that does not follow, or a call larger than
//     ServerOptions.MaxCall is RDMA2_ERR_INVAL_CONT.
//   - Reply format (section 6.6.4). Inline when it fits; the Reply chunk
//     when one was provided and the reply does not fit inline (a MUST); a
//     DDP-eligible result into the first Write chunk. When those are not
//     adequate (no Reply chunk or a small one, as when the requester
//     underestimated the reply), the reply is continued if the requester's
//     last credit covers its Sends beyond one reply per call in process;
//     the requester keeps MaxContinuation receives beyond its credits for
//     those parts. Else RDMA2_ERR_REPLY_RESOURCE (length needed), or
//     RDMA2_ERR_WRITE_RESOURCE (chunk 1, length needed) for a result
//     larger than the Write chunk.
//   - Errors (section 7). Read chunks beyond one: RDMA2_ERR_READ_CHUNKS
//     with 1; limits of Limits: RDMA2_ERR_WRITE_CHUNKS and
//     RDMA2_ERR_SEGMENTS with the limit; a Read chunk larger than MaxCall:
//     RDMA2_ERR_SYSTEM (refused before any RDMA Read); a reply header type
//     received by the responder: RDMA2_ERR_INVAL_HTYPE (no reverse
//     direction). An RDMA2_ERROR is never answered.
//   - Remote Invalidation (section 6.5). The requester sets
//     rdma_inv_handle when all its chunks use one R_key (unless
//     NoRemoteInvalidate); the responder uses Send With Invalidate only
//     when rdma_inv_handle names a handle of that call.
//
// # Responder-provided Read chunks
//
// draft-cel-rpcrdma-responder-read-chunks ("the rprc draft") is a version
// 2 extension (rprc.go, rprcpull.go, rprcexpose.go), used on a connection
// only when both peers announce it. What the rprc draft leaves to the
// transport version, or open, was decided so (the XDR first):
//
//	const RDMA2_PROPID_RPRC = 16;   /* uint32: RDMA2_RPRC_* bits */
//	const RDMA2_RPRC_PULL   = 0x1;
//	const RDMA2_RPRC_EXPOSE = 0x2;
//	const RDMA2_RPRC_REMINV = 0x4;
//
//	const RDMA2_REPLY_READ = 16;
//	struct rpcrdma2_hdr_reply_read {
//	        uint32                      rdma_inv_handle;
//	        struct rpcrdma2_write_list  *rdma_writes;
//	        struct rpcrdma2_read_list   *rdma_reply_read;
//	};
//
//	const RDMA2_DONE = 17;
//	struct rpcrdma2_hdr_done {
//	        uint32                      rdma_handle;
//	};
//
// The choices:
//
//   - Announcement (section 6). A transport property, RDMA2_PROPID_RPRC
//     (16), a uint32 of bits: RDMA2_RPRC_PULL (0x1, the sender as
//     requester takes such replies), RDMA2_RPRC_EXPOSE (0x2, the sender as
//     responder sends them), RDMA2_RPRC_REMINV (0x4, the sender's Read
//     chunks may be invalidated by the Send With Invalidate of the
//     notification). Other bits are zero when sent and ignored when
//     received; a value that is not 4 bytes is RDMA2_ERR_BAD_PROPVAL. The
//     requester announces PULL when its negotiated ORD is at least 1
//     (ClientOptions.ORD defaults to 4 on version 2), unless
//     ClientOptions.NoResponderReadChunks; the responder EXPOSE, and
//     REMINV unless ServerOptions.NoRemoteInvalidate, unless
//     ServerOptions.NoResponderReadChunks.
//   - XDR. The version 2 draft's RDMA2_REPLY_EXTERNAL carries only a Reply
//     chunk, so the reply is a new header type, RDMA2_REPLY_READ (16), and
//     the notification (the rprc draft's RDMA_DONE) is RDMA2_DONE (17),
//     both below. rdma_writes echoes the call's Write chunks as
//     RDMA2_REPLY_INLINE does (a DDP-eligible result still goes into the
//     first); rdma_reply_read is a Position-Zero Read chunk of at least one
//     segment holding the rest of the Payload stream; rdma_inv_handle is
//     the R_key the requester may invalidate with its notification (0:
//     none). RDMA2_DONE goes under the reply's rdma_xid; rdma_handle is the
//     R_key of the Read chunk's first segment (so that a reply sent twice
//     under one XID is told apart). Both decode in Header.Decode2.
//   - Requester (section 5.3.1). A call marked sunrpc.Call.UnboundedReply
//     (the NFS client marks READDIR, READDIRPLUS and READLINK) offers no
//     Reply chunk where it would have offered one; other calls are
//     planned as before. An RDMA2_REPLY_READ is pulled with one RDMA Read
//     per segment, within the connection's ORD, into a slot-owned region
//     registered for local writes only, up to 64 MiB; then RDMA2_DONE is
//     sent, by Send With Invalidate of rdma_inv_handle when it names the
//     chunk's R_key and both peers announced Remote Invalidation (ours in
//     RFC 8797 private data, the responder's REMINV), else by Send. A
//     reply whose XID no call waits for (abandoned, or forgotten) is
//     notified without a pull; a requester that did not announce PULL
//     notifies and fails the call with ErrChunk (section 4.1.3).
//   - Responder (section 4.1.1). A reply that fits inline, or in the
//     Reply chunk provided, goes there; otherwise, when the extension is
//     in use, it is exposed in a Read chunk: the rprc draft's MUST is
//     taken before the version 2 draft's SHOULD of Message Continuation,
//     which is used only without the extension. The Payload stream is
//     copied into a region of the connection's own protection domain,
//     registered for remote read only, under a fresh STag; at most 2 x
//     ServerOptions.Credits are exposed per connection (beyond: as without
//     the extension). Without the extension, a reply too large for the
//     resources provided is RDMA2_ERR_REPLY_RESOURCE (ERR_CHUNK in version
//     1), the permanent transport error of section 4.1.1.
//   - STag lifetime (section 4.1.3). The STag is valid from the
//     RDMA2_REPLY_READ until its RDMA2_DONE (a local invalidate, or none
//     when the Send With Invalidate did it) or ServerOptions.ReadChunkTimeout
//     (10 s) after the reply, whichever is first: then a requester's RDMA
//     Read of it is a remote access error, and the connection ends. After
//     the timeout the region stays registered, invalid, for another
//     ReadChunkTimeout, so that an RDMA2_DONE racing the timeout by Send
//     With Invalidate still names a registered STag; a notification later
//     than that by Send With Invalidate ends the connection. An RDMA2_DONE
//     that names no exposed chunk (unknown XID or R_key, already expired)
//     is dropped: nothing is invalidated and no RDMA2_ERROR is sent. One
//     without rdma_handle is RDMA2_ERR_BAD_XDR; an RDMA2_REPLY_READ sent to
//     a responder is RDMA2_ERR_INVAL_HTYPE.
//   - Credits (section 5.2.3). Of the rprc draft's two answers, the
//     acknowledgement: RDMA2_DONE is a Send like any other, sent within
//     the responder's rdma_credit (before calls waiting for a credit), and
//     the responder answers every RDMA2_DONE, matched or dropped, with an
//     RDMA2_GRANT (rdma_xid 0), the version 2 header that already means
//     "a credit update without a payload", as the rprc draft's RDMA_ACK.
//     It carries the credit the notification's receive gave back, so a
//     requester whose last credit went into a notification learns at once
//     that it may send again; the requester reposts the reply's receive
//     before it notifies, so the RDMA2_GRANT has a receive waiting.
//   - Metrics: ReplyReadChunks and ReplyReadBytes (replies sent or pulled),
//     PullDone (notifications sent, or received for an exposed chunk),
//     PullDoneDropped and ReadChunkTimeouts (responder).
//
// Send-based DDP (draft-dnoveck-rpcrdma-rtrext) is not implemented; it fits
// as properties and header types too (other code points than the above).
package rpcrdma
