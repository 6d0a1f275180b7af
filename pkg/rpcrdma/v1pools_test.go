package rpcrdma

import (
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestVersion1Pools: a requester with SendDDP at SDDPInline that speaks
// version 1 (the responder answered the negotiation with ERR_VERS, or
// its VersionCache already knew that, or MaxVersion 1) registers what a
// version 1 requester registers (Credits buffers of OurInline to send
// and to receive, nothing for continued replies), where against a
// version 2 responder it registers the larger pools; and calls work.
func TestVersion1Pools(t *testing.T) {
	const credits = 8
	ctx := tctx(t, 30*time.Second)
	v1 := startServer(t, ServerOptions{Credits: credits, MaxVersion: Version})
	v2 := startServer(t, ServerOptions{Credits: credits, Inline: SDDPInline, SendDDP: true})
	dial := func(ts *testSrv, o ClientOptions) (*Client, Metrics) {
		t.Helper()
		o.Credits, o.Metrics = credits, &ClientMetrics{}
		c, err := Dial(ctx, newDev(), ts.srv.Addr().String(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var e xdr.Encoder
		for _, v := range []uint32{0x77, 0, 2, tProg, tVers, 0, 0, 0, 0, 0} {
			e.Uint32(v)
		}
		r, err := c.RoundTrip(ctx, &sunrpc.Call{XID: 0x77, Msg: sunrpc.Message{Head: e.Bytes()}, MaxReplySize: 256})
		if err != nil {
			t.Fatalf("NULL call: %v", err)
		}
		r.Release()
		return c, c.Metrics()
	}
	// The baseline: a version 1 requester with the default buffers.
	_, base := dial(v1, ClientOptions{MaxVersion: Version})
	want := int64(2 * credits * OurInline)
	if base.RegisteredBytes != want {
		t.Fatalf("version 1 requester: %d bytes registered, want %d", base.RegisteredBytes, want)
	}
	sddp := ClientOptions{SendDDP: true, Inline: SDDPInline}
	cache := &VersionCache{}
	for _, tc := range []struct {
		name string
		opts ClientOptions
	}{{"fallback", ClientOptions{Versions: cache}}, {"cached", ClientOptions{Versions: cache}}, {"maxversion-1", ClientOptions{MaxVersion: Version, Versions: &VersionCache{}}}} {
		o := tc.opts
		o.SendDDP, o.Inline = sddp.SendDDP, sddp.Inline
		c, m := dial(v1, o)
		if c.Version() != Version || m.RegisteredBytes != want || c.opts.Inline != OurInline {
			t.Fatalf("%s: version %d, %d bytes registered (inline %d), want version 1 and %d", tc.name, c.Version(), m.RegisteredBytes, c.opts.Inline, want)
		}
	}
	if !cache.Version1Only(v1.srv.Addr().String()) {
		t.Fatal("the fallback was not remembered")
	}
	// Against a version 2 responder, the send-based DDP pools.
	c, m := dial(v2, ClientOptions{SendDDP: true, Inline: SDDPInline, Versions: &VersionCache{}})
	if c.Version() != Version2 || !c.sddp || m.RegisteredBytes < int64((2*credits+MaxContinuation)*SDDPInline) {
		t.Fatalf("version 2: version %d, send-based DDP %v, %d bytes registered", c.Version(), c.sddp, m.RegisteredBytes)
	}
}
