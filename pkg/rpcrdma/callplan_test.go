package rpcrdma

import (
	"errors"
	"testing"
)

// Header sizes with 8-segment chunks (RFC 8166 section 4.7):
//
//	no chunks                     28
//	+ Read chunk   8 x 24       = 192
//	+ Write chunk  8 + 8 x 16   = 136
//	+ Reply chunk  4 + 8 x 16   = 132
func TestHeaderSizes(t *testing.T) {
	if readChunkHdr(8) != 192 || writeChunkHdr(8) != 136 || replyChunkHdr(8) != 132 ||
		maxCallHdr(8) != 356 || maxReplyHdr(8) != 164 {
		t.Fatal("header size helpers")
	}
	// They agree with the encoder.
	segs := make([]Segment, 8)
	reads := make([]ReadSegment, 8)
	h := Header{Proc: ProcNoMsg, Reads: reads, Writes: [][]Segment{segs}, HasReply: true, Reply: segs}
	if h.Len() != MinHeaderLen+readChunkHdr(8)+writeChunkHdr(8)+replyChunkHdr(8) {
		t.Fatalf("Len %d", h.Len())
	}
}

func TestPlanCall(t *testing.T) {
	i1k := Inline{Send: 1024, Recv: 1024, MaxSegs: 8}
	i4k := Inline{Send: 4096, Recv: 4096, MaxSegs: 8}
	tests := []struct {
		name        string
		call, reply Message
		in          Inline
		want        CallPlan
	}{
		{"GETATTR", Message{Head: 120}, Message{Head: 112}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 120, Reply: ReplyInline, HeaderMax: 28}},
		{"call exactly at the threshold", Message{Head: 996}, Message{Head: 100}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 996, Reply: ReplyInline, HeaderMax: 28}},
		{"call 4 bytes over the threshold", Message{Head: 1000}, Message{Head: 100}, i1k,
			CallPlan{Proc: ProcNoMsg, Call: CallLong, ReadLen: 1000, Reply: ReplyInline, HeaderMax: 28 + 192}},
		{"WRITE 4096 on 1 KiB", Message{Head: 140, Payload: 4096, DDP: true}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallReadChunk, InlineLen: 140, ReadPos: 140, ReadLen: 4096, Reply: ReplyInline, HeaderMax: 220}},
		{"WRITE 4095: no pad in the chunk, none inline", Message{Head: 140, Payload: 4095, DDP: true}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallReadChunk, InlineLen: 140, ReadPos: 140, ReadLen: 4095, Reply: ReplyInline, HeaderMax: 220}},
		{"WRITE 500 fits inline", Message{Head: 140, Payload: 500, DDP: true}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 640, Reply: ReplyInline, HeaderMax: 28}},
		{"WRITE 501 inline keeps its pad", Message{Head: 140, Payload: 501, DDP: true}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 644, Reply: ReplyInline, HeaderMax: 28}},
		{"SYMLINK: item with a tail", Message{Head: 200, Payload: 2000, Tail: 40, DDP: true}, Message{Head: 300}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallReadChunk, InlineLen: 240, ReadPos: 200, ReadLen: 2000, Reply: ReplyInline, HeaderMax: 220}},
		{"WRITE whose head alone is too big: position zero", Message{Head: 900, Payload: 4096, DDP: true}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcNoMsg, Call: CallLong, ReadLen: 4996, Reply: ReplyInline, HeaderMax: 220}},
		{"WRITE 4096 not DDP: position zero", Message{Head: 140, Payload: 4096}, Message{Head: 148}, i1k,
			CallPlan{Proc: ProcNoMsg, Call: CallLong, ReadLen: 4236, Reply: ReplyInline, HeaderMax: 220}},
		{"READ 32 KiB", Message{Head: 136}, Message{Head: 120, Payload: 32768, DDP: true}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyWriteChunk, WriteLen: 32768, HeaderMax: 164}},
		{"READ 512 comes inline", Message{Head: 136}, Message{Head: 120, Payload: 512, DDP: true}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyInline, HeaderMax: 28}},
		{"READ 1001: Write chunk without pad", Message{Head: 136}, Message{Head: 120, Payload: 1001, DDP: true}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyWriteChunk, WriteLen: 1001, HeaderMax: 164}},
		{"READ with a large non-payload part: Reply chunk", Message{Head: 136}, Message{Head: 900, Payload: 4096, DDP: true}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyLong, ReplyLen: 4996, HeaderMax: 160}},
		{"READ without a result buffer: Reply chunk", Message{Head: 136}, Message{Head: 120, Payload: 4095}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyLong, ReplyLen: 4216, HeaderMax: 160}},
		{"READDIR 8 KiB", Message{Head: 148}, Message{Head: 8192}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 148, Reply: ReplyLong, ReplyLen: 8192, HeaderMax: 160}},
		{"Long call and long reply", Message{Head: 2000}, Message{Head: 8000}, i1k,
			CallPlan{Proc: ProcNoMsg, Call: CallLong, ReadLen: 2000, Reply: ReplyLong, ReplyLen: 8000, HeaderMax: 28 + 132 + 192}},
		{"Write chunk header pushes the call out", Message{Head: 900}, Message{Head: 120, Payload: 8192, DDP: true}, i1k,
			CallPlan{Proc: ProcNoMsg, Call: CallLong, ReadLen: 900, Reply: ReplyWriteChunk, WriteLen: 8192, HeaderMax: 28 + 136 + 192}},
		{"READ 0 bytes", Message{Head: 136}, Message{Head: 120, DDP: true}, i1k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyInline, HeaderMax: 28}},
		{"4 KiB: WRITE 4096 needs a Read chunk", Message{Head: 140, Payload: 4096, DDP: true}, Message{Head: 148}, i4k,
			CallPlan{Proc: ProcMsg, Call: CallReadChunk, InlineLen: 140, ReadPos: 140, ReadLen: 4096, Reply: ReplyInline, HeaderMax: 220}},
		{"4 KiB: WRITE 3900 inline", Message{Head: 140, Payload: 3900, DDP: true}, Message{Head: 148}, i4k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 4040, Reply: ReplyInline, HeaderMax: 28}},
		{"4 KiB: READ reply exactly at the threshold", Message{Head: 136}, Message{Head: 100, Payload: 3968, DDP: true}, i4k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyInline, HeaderMax: 28}},
		{"4 KiB: READ 4 bytes over", Message{Head: 136}, Message{Head: 100, Payload: 3972, DDP: true}, i4k,
			CallPlan{Proc: ProcMsg, Call: CallInline, InlineLen: 136, Reply: ReplyWriteChunk, WriteLen: 3972, HeaderMax: 164}},
		{"default MaxSegs 16", Message{Head: 140, Payload: 4096, DDP: true}, Message{Head: 148}, Inline{Send: 1024, Recv: 1024},
			CallPlan{Proc: ProcMsg, Call: CallReadChunk, InlineLen: 140, ReadPos: 140, ReadLen: 4096, Reply: ReplyInline, HeaderMax: 28 + 384}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planCall(tc.call, tc.reply, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("planCall:\n got %+v\nwant %+v", got, tc.want)
			}
			checkCallPlan(t, tc.call, tc.reply, tc.in, got)
		})
	}
}

// checkCallPlan verifies the invariants every plan must keep.
func checkCallPlan(t testing.TB, call, reply Message, in Inline, p CallPlan) {
	t.Helper()
	if p.HeaderMax+p.InlineLen > in.Send {
		t.Errorf("Send of %d+%d bytes over the threshold %d", p.HeaderMax, p.InlineLen, in.Send)
	}
	switch p.Call {
	case CallInline:
		if p.InlineLen != call.Len() || p.ReadLen != 0 || p.Proc != ProcMsg {
			t.Errorf("inline plan %+v", p)
		}
	case CallReadChunk:
		if !call.DDP || p.ReadPos != uint32(call.Head) || p.ReadLen != call.Payload || p.InlineLen != call.Head+call.Tail || p.ReadPos%4 != 0 || p.Proc != ProcMsg {
			t.Errorf("read chunk plan %+v", p)
		}
	case CallLong:
		if p.ReadPos != 0 || p.ReadLen != call.Len() || p.InlineLen != 0 || p.Proc != ProcNoMsg {
			t.Errorf("long plan %+v", p)
		}
	}
	segs := in.MaxSegs
	if segs == 0 {
		segs = DefaultMaxSegs
	}
	switch p.Reply {
	case ReplyInline:
		if MinHeaderLen+reply.Len() > in.Recv || p.WriteLen != 0 || p.ReplyLen != 0 {
			t.Errorf("inline reply plan %+v", p)
		}
	case ReplyWriteChunk:
		if !reply.DDP || p.WriteLen != reply.Payload || MinHeaderLen+writeChunkHdr(segs)+reply.Head+reply.Tail > in.Recv {
			t.Errorf("write chunk reply plan %+v", p)
		}
	case ReplyLong:
		if p.ReplyLen != reply.Len() {
			t.Errorf("long reply plan %+v", p)
		}
	}
}

func TestPlanCallErrors(t *testing.T) {
	ok := Message{Head: 100}
	i1k := Inline{Send: 1024, Recv: 1024, MaxSegs: 8}
	for _, tc := range []struct {
		name        string
		call, reply Message
		in          Inline
	}{
		{"negative head", Message{Head: -4}, ok, i1k},
		{"negative payload", Message{Head: 4, Payload: -1}, ok, i1k},
		{"head not a multiple of 4", Message{Head: 3}, ok, i1k},
		{"tail not a multiple of 4", ok, Message{Head: 4, Payload: 3, Tail: 2}, i1k},
		{"too large", Message{Head: 1 << 30, Payload: 1 << 30, DDP: true}, ok, i1k},
		{"send threshold below the largest header", ok, ok, Inline{Send: 355, Recv: 1024, MaxSegs: 8}},
		{"recv threshold below the largest header", ok, ok, Inline{Send: 1024, Recv: 163, MaxSegs: 8}},
		{"zero thresholds", ok, ok, Inline{}},
		{"MaxSegs above 64", ok, ok, Inline{Send: 1 << 20, Recv: 1 << 20, MaxSegs: 65}},
	} {
		if _, err := planCall(tc.call, tc.reply, tc.in); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := planCall(ok, ok, Inline{Send: 356, Recv: 164, MaxSegs: 8}); err != nil {
		t.Errorf("smallest thresholds: %v", err)
	}
}

func TestInlineFor(t *testing.T) {
	in := inlineFor(defaultPrivateData(), absentPrivateData(), 0)
	if in != (Inline{Send: 1024, Recv: 1024}) {
		t.Errorf("inlineFor = %+v", in)
	}
}

func FuzzPlanCall(f *testing.F) {
	f.Add(140, 4096, 0, true, 120, 32768, 0, true, 1024, 1024, 8)
	f.Add(2000, 0, 0, false, 8000, 0, 0, false, 4096, 4096, 16)
	f.Add(200, 2001, 40, true, 300, 5, 4, true, 1024, 4096, 0)
	f.Fuzz(func(t *testing.T, ch, cp, ct int, cd bool, rh, rp, rt int, rd bool, send, recv, segs int) {
		call := Message{Head: ch, Payload: cp, Tail: ct, DDP: cd}
		reply := Message{Head: rh, Payload: rp, Tail: rt, DDP: rd}
		in := Inline{Send: send, Recv: recv, MaxSegs: segs}
		p, err := planCall(call, reply, in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		checkCallPlan(t, call, reply, in, p)
	})
}
