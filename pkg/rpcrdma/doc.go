// Package rpcrdma implements the wire codec and the pure decision logic of
// RPC-over-RDMA version 1 (RFC 8166) and version 2
// (draft-ietf-nfsv4-rpcrdma-version-two, "the draft"), the transport that
// carries ONC RPC (RFC 5531) and so NFSv3 (RFC 1813, bound by RFC 8267)
// over RDMA.
//
// The package keeps the header codec apart from connection state, and
// the requester apart from the responder, as Linux keeps xprtrdma apart
// from svcrdma over one marshaling file (roles_test.go checks that no file
// declares methods of both roles).
//
// The header codec (header_*.go) only encodes and decodes; it holds no
// connection state and performs no I/O. Each decoder has a fuzz target
// beside it:
//
//   - header_v1.go: the transport header (RFC 8166 section 4): Header,
//     Segment, ReadSegment, Header.Encode, Header.Decode with Limits;
//     header_chunklists.go: the Read list, Write list and Reply chunk.
//   - header_v2.go, header_props.go: version 2 headers (Header.Decode2;
//     Encode of a Header with Vers 2) and transport properties (the
//     draft's sections 5, 6 and 8).
//   - header_rprc.go, header_sddp.go: the header arms and properties of
//     the rprc and rtrext drafts (RDMA2_REPLY_READ, RDMA2_DONE; the
//     Receive Buffer Structure, rpcrdma2_sddp, Transmit Errors).
//   - header_errors.go: HeaderError and the kinds of decoding errors;
//     header_errreply.go: the RDMA_ERROR a responder sends for a header it
//     could not decode (RFC 8166 section 4.5).
//   - header_privdata.go: the RDMA-CM private data of RFC 8797 (magic
//     0xf6ab0e18) and the negotiation of the inline thresholds.
//
// The planners and layouts, pure functions both roles use:
//
//   - callplan.go: the requester's choice of chunks for a call and its reply
//     (modelled on Linux xprtrdma rpcrdma_marshal_req).
//   - replyplan.go: the responder's choice of how to return a reply within the
//     chunks the requester provided (modelled on Linux svcrdma), and the
//     checks a requester makes on the chunks a reply returns.
//   - continuation.go, sddpplace.go, sddpgroup.go: the sizes of a
//     continued message and where send-based DDP places an item, in one
//     Send or across a transmission group.
//   - registration.go, metrics.go, drain.go: counted memory registration,
//     Metrics (calls, credits, chunks and bytes by kind, RDMA errors,
//     registered memory) and ErrorReply, the completion queue drain.
//
// The transport, over any verbs.Device (pkg/verbs), uses them. The
// requester (requester*.go, *_requester.go):
//
//   - requester.go: Dial returns a Client, a sunrpc.ClientTransport: RFC
//     8797 private data, pools of pre-registered send and receive buffers
//     (Credits x Inline bytes), per-call registration of Read, Write and
//     Reply chunks, invalidated before RoundTrip returns (or remotely, by
//     Send With Invalidate); requester_registration.go its registrations;
//     grants_requester.go the credit window (RFC 8166 section 3.3.1).
//   - requester_negotiate.go: version 2 with fallback to version 1.
//   - continuation_requester.go, rprc_requester.go, sddp_requester.go,
//     sddpgroup_requester.go: its side of the version 2 features below.
//
// The responder (responder*.go, *_responder.go):
//
//   - responder.go: Listen returns a Server; Serve dispatches calls to a
//     sunrpc.Dispatcher: receives posted before credits are granted, Read
//     chunks pulled within the negotiated ORD, replies pushed into Write and
//     Reply chunks, RDMA_ERROR for bad headers; responder_v2.go its
//     version 2 messages; responder_registration.go,
//     responder_payloadfault.go its registrations and the faults of
//     file-backed payloads.
//   - grants_responder.go: the responder's credit grants (a budget shared
//     max-min fair among connections, grants per AUTH_SYS machine name).
//   - continuation_responder.go, rprc_responder.go, sddp_responder.go,
//     sddpgroup_responder.go: its side of the version 2 features below.
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
// to everyone else (requester_negotiate.go, responder_v2.go, continuation*.go). Version
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
//     (grants_responder.go) plus that one receive, advertises posts -
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
// 2 extension (header_rprc.go, rprc_requester.go, rprc_responder.go), used on a connection
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
// # Send-based DDP
//
// draft-dnoveck-rpcrdma-rtrext ("the rtrext draft") sections 3, 7 and 8,
// send-based DDP only, is a version 2 extension (header_sddp.go,
// sddpplace.go, sddp_*.go, sddpgroup*.go), used in a direction only when both peers
// announce it.
// The rtrext draft was written for version 1's RDMA_OPTIONAL and leaves
// its XDR "TBD"; it is defined so:
//
//	const RDMA2_PROPID_RBSTRUCT = 17;       /* xmrbs_buf (7.2, 8.3) */
//	struct xmrbs_seg   { uint32 xmrseg_length; uint32 xmrseg_align;
//	                     uint32 xmrseg_flags; };  /* XMRSFLAG_DDP = 0x1 */
//	struct xmrbs_group { uint32 xmrgrp_count; xmrbs_seg xmrgrp_info; };
//	struct xmrbs_buf   { uint32 xmrbuf_length;
//	                     xmrbs_group xmrbuf_groups<16>; };
//
//	struct xmddp_mitem {                    /* 7.3, XMDTYPE_TBSN only */
//	        uint32  xmdmi_disp;             /* xmddp_vsdisp */
//	        uint32  xmdmi_length;           /* xmddp_itemlen, no pad */
//	        uint32  xmdmi_type;             /* XMDTYPE_TBSN = 2 */
//	        uint32  xmdl_offset;
//	        uint32  xmdl_bsnum<64>;         /* xmddp_tbsn */
//	};
//	struct rpcrdma2_sddp {
//	        uint32          rdma_pslen;     /* xmddp_pldisp */
//	        xmddp_mitem     rdma_ddp<1>;    /* xmddp_grpinfo */
//	};
//	const RDMA2_CALL_SDDP  = 18;  /* RDMA2_CALL_INLINE body + rpcrdma2_sddp */
//	const RDMA2_REPLY_SDDP = 19;  /* RDMA2_REPLY_INLINE body + rpcrdma2_sddp */
//
//	const RDMA2_CALL_SDDP_MIDDLE  = 21;   /* optxmt_cont (9.4) */
//	const RDMA2_REPLY_SDDP_MIDDLE = 22;
//	struct rpcrdma2_hdr_sddp_middle {
//	        uint32          rdma_xnum;      /* optxc_xnum, from 0 */
//	};
//
//	const RDMA2_XMTERR = 20;      /* optxmt_err (9.5) */
//	struct xms_id { uint32 xmsi_xid; uint32 xmsi_dir; uint32 xmsi_seq; };
//	union optx_info switch (uint32 optxe_which) {
//	case OPTXERR_BADHMT: case OPTXERR_BADOMT:
//	case OPTXERR_BADSEQ: case OPTXERR_BADXID:
//	        uint32 optxi_expect; uint32 optxi_current;
//	case OPTXERR_BADCONT:
//	        void;
//	case OPTXERR_BADOFF: case OPTXERR_BADTBSN: case OPTXERR_BADPL:
//	        uint32 optxi_value; uint32 optxi_min; uint32 optxi_max;
//	};
//	struct rpcrdma2_hdr_xmterr {
//	        xms_id  optxe_bad; xms_id *optxe_lead; optx_info optxe_info;
//	};
//
// The choices:
//
//   - Code points. The rtrext draft's characteristic 5 is version 2's
//     RDMA2_PROPID_BRS, so the structure is property 17; its operations
//     5..8 (XMTREQ, XMTRESP, XMTCONT, XMTERR) become header types: the
//     message DDP structure rides behind the *_INLINE bodies as two new
//     types, 18 and 19 (version 2's own chunk lists stay, so explicit
//     RDMA (XMDTYPE_EXRW) is not used and is RDMA2_ERR_BAD_XDR), and the
//     Transmit Error is 20. The rtrext draft's union arms are garbled;
//     optx_info is the one above.
//   - Announcement (sections 5.3, 8.3). A peer with SendDDP on
//     (ClientOptions.SendDDP, ServerOptions.SendDDP: off in the
//     library, on in the mount and the export server)
//     announces its structure: a non-DDP segment of 1024 bytes (aligned
//     1024) for the transport header and the Payload stream, then
//     Inline/4096 - 1 pages with XMRSFLAG_DDP, aligned 4096, then 3072
//     non-DDP bytes (the rest of the Inline bytes a receive holds). Inline
//     must be a multiple of 4096 and at least 8192 (SDDPInline, 16 KiB, is
//     what the mount option and server flag use); otherwise nothing is
//     announced. Receive pools are allocated page-aligned and each receive
//     starts 3072 bytes into a page (one page more per receive), so the
//     announced alignment holds in memory, and a placed item costs the
//     wire at most the 1024-byte header segment besides itself (a 4 KiB
//     READ result: a Send of 5 KiB, not 8). A structure whose length is
//     not the sum of its segments, or exceeds the peer's
//     RDMA2_PROPID_RBSIZ, a group of no segment, a segment not a
//     multiple of 4 bytes or an alignment not a power of 2 is
//     RDMA2_ERR_BAD_PROPVAL. Announcing means "send to me this way"; a
//     peer sends this way only when it also has SendDDP on.
//   - Placement (sections 7.2, 7.3). A sender uses the first run of
//     DDP-targetable segments of equal length (the window). A message is
//     its header, the Payload stream without the item (rdma_pslen bytes),
//     zeros up to the window, the item and its XDR pad: TBSN 0.. in
//     order, xmdl_offset 0, xmdmi_disp the item's offset in the virtual
//     XDR stream (its length word stays in the stream, as for a Read
//     chunk). It is used for a call's DDP-eligible argument when the call
//     would take a Read chunk, or goes inline with an argument of at
//     least a page, and for a reply's DDP-eligible result when the reply
//     goes inline (no Write chunk used) with a result of at least a
//     page; only when everything fits one Send of the negotiated size
//     and the header and stream stay before the window. Otherwise the
//     message goes as without the extension, or as a transmission group.
//   - Transmission groups (sections 4.2, 7.3, 9.4; sddpgroup*.go). An
//     item larger than the window goes, with ClientOptions.SendDDPGroups
//     (off by default, see the measurements below), as RDMA2_*_SDDP_MIDDLE
//     Sends then the final RDMA2_*_SDDP, posted together (no other
//     message between them), when it takes 2 to MaxContinuation (16)
//     Sends and at most 64 segments: a call whose argument would go in a
//     Read chunk, when the responder's last rdma_credit covers the Sends
//     now; a reply whose call offered no Write chunk (a requester with
//     SendDDPGroups omits it; a call without Call.ReplyPayload has
//     none) and that does not fit one Send, when the
//     requester's last rdma_credit covers them beyond one reply per call
//     in process (else it goes on as without the extension:
//     responder-provided Read chunk, continuation or RDMA2_ERR_*). The
//     version 2 final header comes last and carries the whole group's
//     rpcrdma2_sddp (the rtrext draft puts it in the first Send; version
//     2 puts chunk lists in the final one): its header and the whole
//     Payload stream go in the final Send, before the window. A middle
//     carries its 20-byte header, zeros up to the window and the next
//     window's worth of the item, nothing of the stream (optxc_pslen 0);
//     rdma_xnum numbers the Sends 0, 1, ... in order. Segments are
//     numbered across the group (xmddp_tbsn): segment t is segment t mod
//     Segs of the group's Send t / Segs, so an item of n bytes takes the
//     segments 0..ceil(n/4096)-1 and ceil(n/12288) Sends at SDDPInline.
//     A middle type of its own (not RDMA2_*_MIDDLE, whose rdma_remaining
//     counts Payload stream bytes) tells the receiver on arrival that the
//     receive holds placed data and must be kept; one sent to a
//     responder that announced no structure is RDMA2_ERR_INVAL_HTYPE.
//     The requester offers
//     no Write chunk for a result that fits a group only when
//     responder-provided Read chunks are in use (the responder's answer
//     when the credits do not cover a group) and it can reserve the
//     group's other receives among the MaxContinuation it keeps beyond
//     its credits.
//   - Credits of a group. Every Send of a group is a message under the
//     version 2 credit rules above: its sender needs the peer's
//     rdma_credit to cover all of them before posting the first. The
//     receiver holds the middles' receives (not reposted: the responder
//     counts them held and in process, so its rdma_credit advertises
//     them as used) until the call's reply is posted (responder) or the
//     reply is released (requester); they are reposted with the final
//     Send's receive, before the reply's credit is computed.
//   - Receiving. The responder hands the call's argument to the upper
//     layer as a slice of its receive buffer: page-aligned, no copy; the
//     receive is reposted after the reply, as the Read chunk buffer is
//     reused only then. An argument of a group is handed up as the
//     pieces where it landed, one per Send (sunrpc.Request.ArgPayloadVec:
//     page-aligned, no copy), in the held receives; the NFS server
//     writes them with pwritev. The requester copies a placed result
//     once from its receive buffer (or the group's) into
//     Call.ReplyPayload (sunrpc.Reply.Placed), or, without one, rebuilds
//     the reply body with it; with Call.KeepPlaced it hands the result
//     on as the pieces where it landed (sunrpc.Reply.PlacedVec), its
//     receives held until the reply is released: the FUSE mount writes
//     READ data to the kernel from them (writev) and releases them then.
//   - Errors (section 9.5). The receiver checks the placement against
//     its own structure and answers RDMA2_XMTERR (rdma_xid and xmsi_xid
//     the call's, xmsi_dir 0, xmsi_seq 0, no optxe_lead): OPTXERR_BADPL
//     for rdma_pslen past the message or an xmdmi_disp not a multiple of
//     4 or past rdma_pslen; OPTXERR_BADTBSN for a segment number past the
//     window (range 0..segments-1) or not following the previous (min =
//     max = the expected one); OPTXERR_BADOFF for xmdl_offset not a
//     multiple of 4 or past the segment, an item overrunning the segments
//     named or the bytes received, or overlapping the header and stream.
//     Nothing is handed up; the call fails with the *XmitErr (it matches
//     ErrChunk). RDMA2_CALL_SDDP to a responder that announced no
//     structure is RDMA2_ERR_INVAL_HTYPE; more than one item, another
//     xmddp_type, no segment or more than 64 is RDMA2_ERR_BAD_XDR. A
//     requester does not answer a bad RDMA2_REPLY_SDDP (replies are never
//     answered); the call fails with the *XmitErr. In a group, xmsi_seq
//     names the Send where the check fails: OPTXERR_BADTBSN for a segment
//     past the group's last (Max the last: Sends x Segs - 1),
//     OPTXERR_BADOFF for an item running past the bytes a Send brought,
//     OPTXERR_BADCONT for a final Send that places no item; a group that
//     breaks is OPTXERR_BADSEQ (rdma_xnum not the next, or past
//     MaxContinuation Sends; Expect the next), OPTXERR_BADXID (a Send of
//     another call), OPTXERR_BADHMT (another header type; Expect
//     RDMA2_CALL_SDDP), with optxe_lead the group's first Send. The
//     responder then reposts the receives held, drops the group's
//     further Sends, and answers its final Send once with that error;
//     the message that broke it is handled as if no group were open.
//     The requester fails the call with it.
//   - Metrics: SendDDPMsgs and SendDDPBytes (messages sent or received
//     with a placed item, and its bytes), SendDDPGroups (of those, as a
//     transmission group), SendDDPKept (results handed on, not copied),
//     XmitErrors.
//
// Memory of send-based DDP. The structure is the same for every receive
// of a connection (section 7.2 has one xmrbs_buf per receiver), so the
// DDP-targetable pages cost Inline bytes in every receive and every send
// buffer, and each receive a page more (its header segment ends on a page
// boundary). Per connection at 32 credits, version 2, the requester
// registers 32 send and 48 receive buffers (32, and 16 for the parts of
// a continued reply), the responder 33 of each:
//
//	Inline                requester   responder   DDP item by Send
//	4 KiB (OurInline)     320 KiB     264 KiB     none (chunks)
//	16 KiB (SDDPInline)   1.44 MiB    1.16 MiB    4..12 KiB
//	64 KiB                5.19 MiB    4.25 MiB    4..60 KiB
//
// plus, per slot and only once it sends a continued message or a
// transmission group, MaxContinuation x Inline of continuation buffers
// (256 KiB at SDDPInline). The mount and the
// export server turn send-based DDP on by default at SDDPInline: about
// 4.5 times the buffer memory of version 1 (about what Linux xprtrdma's 128
// slots of 4 KiB send and receive buffers take), for which READ and
// WRITE data of up to 12 KiB, the common small-I/O sizes, save a
// registration, an RDMA operation and an invalidation. Larger data goes
// in chunks as before: placing it by Send needs receive memory as large
// as the data in flight (64 KiB buffers, 16 times version 1, still move
// only 60 KiB; 1 MiB would take 18 such receives per call), where a
// chunk places it in the caller's own memory. A requester that speaks
// version 1 (Linux knfsd answers ERR_VERS: it reconnects once, and
// VersionCache remembers it for an hour) registers version 1's 4 KiB
// buffers whatever SendDDP asks, and no receives for continued replies:
// 2 x Credits x 4 KiB, 256 KiB at 32 credits.
//
// Transmission groups move more than 12 KiB without receive buffers as
// large as the data, but on software iWARP they do not beat the chunks
// (BenchmarkSendDDPWrite, BenchmarkSendDDPRead, one call outstanding,
// medians of 3 runs of 1 s on a shared 2-core machine, spread about
// 30%): a WRITE-like argument of 32, 64 and 128 KiB takes 152, 349 and
// 440 us as a group against 174, 192 and 314 us in a Read chunk; a
// READ-like result 146, 230 and 405 us against 154, 164 and 214 us in a
// Write chunk. Each 12 KiB costs a Send of 13 KiB (the header segment
// travels as zeros) with its per-message cost, and registration, which
// a group saves, is cheap on siw; so groups are off by default
// (SendDDPGroups, the mount option sddpgroups). With 64 KiB buffers a
// 32 KiB argument goes in one Send: 115 us against 174 us in a Read
// chunk (a result: 124 against 154 us), for four times SDDPInline's
// buffer memory (5.2 MiB per requester connection at 32 credits): the
// default stays SDDPInline.
package rpcrdma
