package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

var errBadResult = errors.New("unexpected result")

// TestNoAllocsPerCall: in the steady state a call allocates nothing, on the
// requester side nor on the responder side, over RDMA and over sunrpc's TCP
// transport. testing.AllocsPerRun counts the mallocs of the whole process,
// so the responder's workers and the siw queue pairs' goroutines are
// counted too. Over RDMA the calls still register the caller's memory per
// call (Write and Read chunks, under rotated STags) and invalidate it before
// returning: only the Go objects behind a registration are reused.
//
// Under the race detector the calls run but the count is only logged
// (raceEnabled: the race runtime allocates and sync.Pool drops items).
//
// It runs over RPC-over-RDMA version 1 and version 2 (where the long call
// is sent in Continued format, as several Sends, instead of a Position-Zero
// Read chunk).
func TestNoAllocsPerCall(t *testing.T) {
	if testing.Short() {
		t.Skip("1 MiB calls")
	}
	forVersions(t, testNoAllocsPerCall)
}

func testNoAllocsPerCall(t *testing.T) {
	const credits = 8
	rdma, tcp, _, cm := clientPair(t, credits)
	ctx := context.Background()
	const n = 1 << 20

	res := make([]byte, n)
	readSpec := read1MiBSpec(res)
	arg := pattern(n, 11)
	sinkSpec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pSink,
		Args: func(b *sunrpc.Builder) { b.Payload(arg) },
		Results: func(d *xdr.Decoder, placed int) error {
			if d.Uint32() != n {
				return errBadResult
			}
			return d.Err()
		},
		MaxReplySize: 256}
	// 16 KiB each way, not DDP-eligible: over RDMA a Position-Zero Read
	// chunk (a long call) and a Reply chunk (a long reply).
	long := pattern(16<<10, 12)
	longSpec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pEcho,
		Args: func(b *sunrpc.Builder) { b.Opaque(long) },
		Results: func(d *xdr.Decoder, placed int) error {
			if b := d.Opaque(len(long)); len(b) != len(long) || d.Uint32() != 0xcafe {
				return errBadResult
			}
			return d.Err()
		}}

	for _, tr := range []struct {
		name string
		c    *sunrpc.Client
	}{{"rdma", rdma}, {"tcp", tcp}} {
		for _, sh := range []struct {
			name string
			call func() error
		}{
			{"null", func() error { return tr.c.Null(ctx, tProg, tVers) }},
			{"write-chunk-1MiB", func() error { return tr.c.Call(ctx, readSpec) }},
			{"read-chunk-1MiB", func() error { return tr.c.Call(ctx, sinkSpec) }},
			{"long-call-reply-chunk", func() error { return tr.c.Call(ctx, longSpec) }},
		} {
			t.Run(tr.name+"/"+sh.name, func(t *testing.T) {
				before := cm.Metrics()
				// Warm up: every receive buffer of the responder (one
				// worker each) and every credit of the requester grows
				// its buffers once.
				for range 4 * credits {
					if err := sh.call(); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				allocs := testing.AllocsPerRun(40, func() {
					if e := sh.call(); e != nil && err == nil {
						err = e
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if raceEnabled {
					t.Logf("%.1f allocations per call (race detector on: not checked)", allocs)
				} else if allocs != 0 {
					t.Errorf("%.1f allocations per call in the steady state, want 0", allocs)
				}
				m := cm.Metrics()
				if m.Registrations != 0 || m.CreditsInUse != 0 {
					t.Fatalf("after the calls: %+v", m)
				}
				if tr.name != "rdma" {
					return
				}
				// The calls took the path named: one chunk per call, and
				// the single R_key of a Write or Read chunk call
				// invalidated by the responder (Send With Invalidate),
				// the two of a long call with a Reply chunk locally.
				calls := m.Calls - before.Calls
				inv := m.SendWithInvalidate - before.SendWithInvalidate
				var chunks uint64
				switch sh.name {
				case "write-chunk-1MiB":
					chunks = m.WriteChunks - before.WriteChunks
					if !bytes.Equal(res, givePattern[:n]) {
						t.Fatal("wrong data placed")
					}
				case "read-chunk-1MiB":
					chunks = m.ReadChunks - before.ReadChunks
				case "long-call-reply-chunk":
					long := m.PositionZeroChunks - before.PositionZeroChunks
					if pinVersion == 2 {
						long = m.Continued - before.Continued
					}
					chunks = min(long, m.ReplyChunks-before.ReplyChunks)
					inv = 0
				default:
					return
				}
				if chunks != calls || (sh.name != "long-call-reply-chunk" && inv != calls) {
					t.Fatalf("%d calls: %d chunks, %d Send With Invalidate", calls, chunks, inv)
				}
			})
		}
	}
}
