package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// fakeServer is an in-memory NFSv3 server of one regular file (handle
// "file") and one directory (handle "dir") for the unit tests of the
// pipelining and commit logic. WRITE data goes to data, visible to READ at
// once; COMMIT copies data to stable; reboot drops what was not committed
// and changes the write verifier, as a real server restart does.
type fakeServer struct {
	mu       sync.Mutex
	data     []byte // what READ sees
	stable   []byte // what survived the last COMMIT
	verf     uint64
	maxIO    uint32 // FSINFO rtmax/wtmax
	maxReply int    // bytes per READ/WRITE reply, 0 = all (short READ/WRITE otherwise)
	delay    time.Duration

	rebootBeforeCommit atomic.Int32 // >0: reboot before the next COMMIT
	rebootAfterWrites  atomic.Int32 // >0: reboot after that many more WRITEs
	jukebox            atomic.Int32 // answer that many GETATTRs with JUKEBOX
	badCookieAt        atomic.Int64 // READDIRPLUS at this cookie answers BAD_COOKIE once
	slowReadsBelow     atomic.Int64 // READs at offsets below this wait 50 ms first
	names              []string

	inflight, maxInflight atomic.Int32
	writes, commits       atomic.Int32
	noPayloadWrites       atomic.Int32 // WRITE calls whose data was not a DDP payload
	noMaxReply            atomic.Int32 // calls without MaxReplySize
	placed                atomic.Int32 // replies whose data the fake transport placed
	srv                   *sunrpc.Server
}

var (
	fakeFile = nfs3.MustFH([]byte("file"))
	fakeDir  = nfs3.MustFH([]byte("dir"))
)

func newFakeServer(maxIO uint32) *fakeServer {
	f := &fakeServer{maxIO: maxIO}
	f.badCookieAt.Store(-1)
	procs := make([]sunrpc.Handler, nfs3.NumProcs)
	procs[nfs3.ProcGetattr] = f.getattr
	procs[nfs3.ProcFsinfo] = f.fsinfo
	procs[nfs3.ProcRead] = f.read
	procs[nfs3.ProcWrite] = f.write
	procs[nfs3.ProcCommit] = f.commit
	procs[nfs3.ProcReaddirplus] = f.readdirplus
	f.srv = sunrpc.NewServer(nil)
	f.srv.Register(nfs3.Program, nfs3.Version, procs)
	return f
}

func (f *fakeServer) attr() nfs3.Fattr {
	return nfs3.Fattr{Type: nfs3.TypeReg, Mode: 0o644, Nlink: 1, Size: uint64(len(f.data)), FileID: 1}
}

func (f *fakeServer) reboot() {
	f.data = append([]byte(nil), f.stable...)
	f.verf++
}

func (f *fakeServer) wverf() (v nfs3.WriteVerf) {
	for i := range 8 {
		v[i] = byte(f.verf >> (8 * i))
	}
	return v
}

func (f *fakeServer) enter() func() {
	n := f.inflight.Add(1)
	for {
		m := f.maxInflight.Load()
		if n <= m || f.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	return func() { f.inflight.Add(-1) }
}

func (f *fakeServer) getattr(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	var a nfs3.GetattrArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	var res nfs3.GetattrRes
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.jukebox.Load() > 0:
		f.jukebox.Add(-1)
		res.Status = nfs3.ErrJukebox
	case fhEqual(a.Object, fakeFile):
		res.Attr = f.attr()
	default:
		res.Status = nfs3.ErrStale
	}
	res.Encode(&b.Encoder)
	return nil
}

func (f *fakeServer) fsinfo(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	res := nfs3.FsinfoRes{RTMax: f.maxIO, RTPref: f.maxIO, RTMult: 4096, WTMax: f.maxIO, WTPref: f.maxIO, WTMult: 4096, DTPref: 4096, MaxFileSize: 1 << 62}
	res.Encode(&b.Encoder)
	return nil
}

func (f *fakeServer) read(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	defer f.enter()()
	var a nfs3.ReadArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	if int64(a.Offset) < f.slowReadsBelow.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var res nfs3.ReadRes
	if !fhEqual(a.File, fakeFile) {
		res.Status = nfs3.ErrStale
		res.Encode(&b.Encoder)
		return nil
	}
	n := uint64(a.Count)
	if f.maxReply > 0 {
		n = min(n, uint64(f.maxReply))
	}
	size := uint64(len(f.data))
	lo := min(a.Offset, size)
	hi := min(lo+n, size)
	res.Attr = nfs3.Attrs(f.attr())
	res.Data = append([]byte(nil), f.data[lo:hi]...)
	res.EOF = hi == size
	encodeDDPResult(b, &res)
	return nil
}

// encodeDDPResult marks the result's DDP-eligible item as b's payload, so
// that a placing fake transport can put it into the call's ReplyPayload.
func encodeDDPResult(b *sunrpc.Builder, m nfs3.DDPMessage) {
	var scratch xdr.Encoder
	p := m.Encode(&scratch)
	h := scratch.Bytes()
	if len(h) >= 4 && int(uint32(h[len(h)-4])<<24|uint32(h[len(h)-3])<<16|uint32(h[len(h)-2])<<8|uint32(h[len(h)-1])) == len(p) && p != nil {
		b.Fixed(h[:len(h)-4])
		b.Payload(p)
		return
	}
	b.Fixed(h) // error arm, or empty data: no payload
}

func (f *fakeServer) write(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	defer f.enter()()
	var a nfs3.WriteArgs
	if err := a.Decode(req.ArgsDecoder(), nil, false); err != nil {
		return err
	}
	f.writes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var res nfs3.WriteRes
	if !fhEqual(a.File, fakeFile) {
		res.Status = nfs3.ErrStale
		res.Encode(&b.Encoder)
		return nil
	}
	d := a.Data
	if f.maxReply > 0 && len(d) > f.maxReply {
		d = d[:f.maxReply]
	}
	end := a.Offset + uint64(len(d))
	if end > uint64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-uint64(len(f.data)))...)
	}
	copy(f.data[a.Offset:], d)
	res.Count = uint32(len(d))
	res.Committed = nfs3.Unstable
	if a.Stable != nfs3.Unstable {
		res.Committed = nfs3.FileSync
		f.syncRange(a.Offset, end)
	}
	res.Verf = f.wverf()
	res.Wcc.After = nfs3.Attrs(f.attr())
	res.Encode(&b.Encoder)
	if f.rebootAfterWrites.Load() > 0 && f.rebootAfterWrites.Add(-1) == 0 {
		f.reboot()
	}
	return nil
}

// syncRange makes data[lo:hi] stable (FILE_SYNC).
func (f *fakeServer) syncRange(lo, hi uint64) {
	if hi > uint64(len(f.stable)) {
		f.stable = append(f.stable, make([]byte, hi-uint64(len(f.stable)))...)
	}
	copy(f.stable[lo:hi], f.data[lo:hi])
}

func (f *fakeServer) commit(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	var a nfs3.CommitArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	f.commits.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rebootBeforeCommit.Load() > 0 {
		f.rebootBeforeCommit.Add(-1)
		f.reboot()
	}
	f.stable = append(f.stable[:0], f.data...)
	res := nfs3.CommitRes{Verf: f.wverf()}
	res.Wcc.After = nfs3.Attrs(f.attr())
	res.Encode(&b.Encoder)
	return nil
}

// readdirplus lists f.names, cookie i+1 for names[i], 10 per reply.
func (f *fakeServer) readdirplus(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	var a nfs3.ReaddirplusArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	var res nfs3.ReaddirplusRes
	if int64(a.Cookie) == f.badCookieAt.Load() {
		f.badCookieAt.Store(-1)
		res.Status = nfs3.ErrBadCookie
		res.Encode(&b.Encoder)
		return nil
	}
	res.Verf = nfs3.CookieVerf{9}
	i := int(a.Cookie)
	for ; i < len(f.names) && len(res.Entries) < 10; i++ {
		res.Entries = append(res.Entries, nfs3.EntryPlus{FileID: uint64(i + 10), Name: f.names[i], Cookie: uint64(i + 1)})
	}
	res.EOF = i >= len(f.names)
	res.Encode(&b.Encoder)
	return nil
}

// fakeTransport is a sunrpc.ClientTransport that hands each call to the
// fake server. With place, a DDP-eligible result is copied into the call's
// ReplyPayload and left out of the body (Placed >= 0), as RPC-over-RDMA
// does with a Write chunk.
type fakeTransport struct {
	f     *fakeServer
	place bool
	done  chan struct{}
	once  sync.Once
}

func (t *fakeTransport) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	select {
	case <-t.done:
		return nil, sunrpc.ErrConnLost
	default:
	}
	if c.MaxReplySize <= 0 {
		t.f.noMaxReply.Add(1)
	}
	raw := c.Msg.AppendTo(nil)
	var d xdr.Decoder
	d.Reset(raw)
	if h, err := sunrpc.DecodeCallHeader(&d); err == nil && h.Proc == nfs3.ProcWrite && !c.Msg.HasPayload {
		t.f.noPayloadWrites.Add(1)
	}
	// The server runs apart from the caller, and a caller whose ctx ends
	// stops waiting, as with sunrpc's real transports.
	type result struct {
		head, payload, tail []byte
		has, ok             bool
	}
	resc := make(chan result, 1)
	go func() {
		var req sunrpc.Request
		req.Reset(raw, nil, nil, "fake")
		var b sunrpc.Builder
		ok := t.f.srv.Dispatch(context.Background(), &req, &b)
		m := b.Message()
		resc <- result{append([]byte(nil), m.Head...), append([]byte(nil), m.Payload...), append([]byte(nil), m.Tail...), m.HasPayload, ok}
		b.RunAfterSend()
	}()
	var res result
	select {
	case res = <-resc:
	case <-ctx.Done():
		return nil, fmt.Errorf("fake: %w", ctx.Err())
	}
	if !res.ok {
		return nil, fmt.Errorf("fake: call dropped: %w", sunrpc.ErrConnLost)
	}
	r := &sunrpc.Reply{Placed: -1}
	if t.place && res.has && c.ReplyPayload != nil && len(res.payload) <= len(c.ReplyPayload) {
		r.Placed = copy(c.ReplyPayload, res.payload)
		t.f.placed.Add(1)
		r.Body = append(res.head, res.tail...)
	} else {
		m := sunrpc.Message{Head: res.head, Payload: res.payload, Tail: res.tail, HasPayload: res.has}
		r.Body = m.AppendTo(nil)
	}
	return r, nil
}

func (t *fakeTransport) Done() <-chan struct{} { return t.done }

func (t *fakeTransport) Close() error {
	t.once.Do(func() { close(t.done) })
	return nil
}

// newFakeClient returns a Client of the fake server over the fake transport.
func newFakeClient(f *fakeServer, place bool, opts Options) (*Client, error) {
	rpc, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) {
		return &fakeTransport{f: f, place: place, done: make(chan struct{})}, nil
	}, sunrpc.ClientOptions{AuthSys: &sunrpc.AuthSysParams{MachineName: "fake"}})
	if err != nil {
		return nil, err
	}
	return New(context.Background(), rpc, fakeDir, opts)
}
