package rpcrdma

import (
	"errors"
	"testing"
)

var (
	callNone       = &Header{XID: 1, Proc: ProcMsg}
	callWrite1     = &Header{XID: 2, Proc: ProcMsg, Writes: [][]Segment{{{Handle: 7, Length: 32768, Offset: 0x1000}}}}
	callWrite2     = &Header{XID: 3, Proc: ProcMsg, Writes: [][]Segment{{{Handle: 7, Length: 4096}, {Handle: 8, Length: 4096}}}}
	callEmptyWrite = &Header{XID: 4, Proc: ProcMsg, Writes: [][]Segment{{}}}
	callReply      = &Header{XID: 5, Proc: ProcMsg, HasReply: true, Reply: []Segment{{Handle: 9, Length: 8192}}}
	callBoth       = &Header{XID: 6, Proc: ProcMsg, Writes: [][]Segment{{{Handle: 7, Length: 32768}}}, HasReply: true, Reply: []Segment{{Handle: 9, Length: 8192}}}
	callTwoWrites  = &Header{XID: 7, Proc: ProcMsg, Writes: [][]Segment{{{Handle: 7, Length: 8192}}, {{Handle: 8, Length: 100}}}}
)

func TestPlanReply(t *testing.T) {
	tests := []struct {
		name   string
		reply  Message
		call   *Header
		inline int
		want   ReplyPlan
	}{
		{"GETATTR", Message{Head: 112}, callNone, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 112, HeaderLen: 28}},
		{"nil call", Message{Head: 112}, nil, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 112, HeaderLen: 28}},
		{"exactly at the threshold", Message{Head: 996}, callNone, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 996, HeaderLen: 28}},
		{"READ into the Write chunk", Message{Head: 120, Payload: 32768, DDP: true}, callWrite1, 1024,
			ReplyPlan{Proc: ProcMsg, Write: true, WriteLen: 32768, InlineLen: 120, HeaderLen: 28 + 8 + 16}},
		{"READ 4095: Write chunk length without pad", Message{Head: 120, Payload: 4095, DDP: true}, callWrite1, 1024,
			ReplyPlan{Proc: ProcMsg, Write: true, WriteLen: 4095, InlineLen: 120, HeaderLen: 52}},
		{"small READ still uses the Write chunk", Message{Head: 120, Payload: 100, DDP: true}, callWrite1, 1024,
			ReplyPlan{Proc: ProcMsg, Write: true, WriteLen: 100, InlineLen: 120, HeaderLen: 52}},
		{"READ across two segments", Message{Head: 120, Payload: 5000, DDP: true}, callWrite2, 1024,
			ReplyPlan{Proc: ProcMsg, Write: true, WriteLen: 5000, InlineLen: 120, HeaderLen: 28 + 8 + 32}},
		{"empty Write chunk: result inline with its pad", Message{Head: 120, Payload: 101, DDP: true}, callEmptyWrite, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 224, HeaderLen: 36}},
		{"unused Write chunk: result not DDP", Message{Head: 96}, callWrite1, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 96, HeaderLen: 52}},
		{"READDIR into the Reply chunk", Message{Head: 6000}, callReply, 1024,
			ReplyPlan{Proc: ProcNoMsg, ReplyLen: 6000, HeaderLen: 28 + 4 + 16}},
		{"Reply chunk exactly full", Message{Head: 8192}, callReply, 1024,
			ReplyPlan{Proc: ProcNoMsg, ReplyLen: 8192, HeaderLen: 48}},
		{"small reply inline despite a Reply chunk", Message{Head: 200}, callReply, 1024,
			ReplyPlan{Proc: ProcMsg, InlineLen: 200, HeaderLen: 48}},
		{"READ not DDP into the Reply chunk, pad included", Message{Head: 120, Payload: 4095}, callReply, 1024,
			ReplyPlan{Proc: ProcNoMsg, ReplyLen: 4216, HeaderLen: 48}},
		{"Write chunk and Reply chunk", Message{Head: 2000, Payload: 30000, DDP: true}, callBoth, 1024,
			ReplyPlan{Proc: ProcNoMsg, Write: true, WriteLen: 30000, ReplyLen: 2000, HeaderLen: 28 + 24 + 20}},
		{"two Write chunks, the first used", Message{Head: 120, Payload: 8000, DDP: true}, callTwoWrites, 1024,
			ReplyPlan{Proc: ProcMsg, Write: true, WriteLen: 8000, InlineLen: 120, HeaderLen: 28 + 24 + 24}},
		{"4 KiB threshold", Message{Head: 4000}, callNone, 4096,
			ReplyPlan{Proc: ProcMsg, InlineLen: 4000, HeaderLen: 28}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planReply(tc.reply, tc.call, tc.inline)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("planReply:\n got %+v\nwant %+v", got, tc.want)
			}
			call := tc.call
			if call == nil {
				call = &Header{}
			}
			// The header BuildReply makes has the planned length, encodes,
			// and passes the requester's checks.
			var h Header
			h.BuildReply(call, got, 42)
			if h.Len() != got.HeaderLen {
				t.Errorf("BuildReply header %d bytes, plan %d", h.Len(), got.HeaderLen)
			}
			b, err := h.Encode(nil)
			if err != nil {
				t.Fatalf("Encode reply: %v", err)
			}
			var d Header
			if _, err := d.Decode(b, nil); err != nil {
				t.Fatalf("Decode reply: %v", err)
			}
			if err := d.CheckReply(call); err != nil {
				t.Errorf("CheckReply: %v", err)
			}
			if got.Write && chunkLen(d.Writes[0]) != uint64(got.WriteLen) {
				t.Errorf("returned Write chunk length %d, want %d", chunkLen(d.Writes[0]), got.WriteLen)
			}
			if d.HasReply && chunkLen(d.Reply) != uint64(got.ReplyLen) {
				t.Errorf("returned Reply chunk length %d, want %d", chunkLen(d.Reply), got.ReplyLen)
			}
		})
	}
}

func TestPlanReplyDoesNotFit(t *testing.T) {
	big := &Header{Proc: ProcMsg, Writes: [][]Segment{make([]Segment, 64)}}
	for _, tc := range []struct {
		name   string
		reply  Message
		call   *Header
		inline int
	}{
		{"4 bytes over inline, no Reply chunk", Message{Head: 1000}, callNone, 1024},
		{"READ without chunks", Message{Head: 120, Payload: 4096, DDP: true}, callNone, 1024},
		{"result larger than the Write chunk", Message{Head: 120, Payload: 32769, DDP: true}, callWrite1, 1024},
		{"result larger than two segments", Message{Head: 120, Payload: 8193, DDP: true}, callWrite2, 1024},
		{"reply larger than the Reply chunk", Message{Head: 8196}, callReply, 1024},
		{"reduced reply larger than the Reply chunk", Message{Head: 9000, Payload: 100, DDP: true}, callBoth, 1024},
		{"header alone over inline", Message{Head: 4}, big, 1024},
	} {
		if _, err := planReply(tc.reply, tc.call, tc.inline); !errors.Is(err, ErrChunk) {
			t.Errorf("%s: err = %v, want ErrChunk", tc.name, err)
		}
	}
	if _, err := planReply(Message{Head: 5}, callNone, 1024); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad size: err = %v, want ErrInvalid", err)
	}
}

func TestFillSegments(t *testing.T) {
	src := []Segment{{1, 4096, 0x1000}, {2, 100, 0x9000}, {3, 4096, 0}}
	for _, tc := range []struct {
		n    uint64
		want []uint32
	}{
		{0, []uint32{0, 0, 0}},
		{1, []uint32{1, 0, 0}},
		{4096, []uint32{4096, 0, 0}},
		{4097, []uint32{4096, 1, 0}},
		{5000, []uint32{4096, 100, 804}},
		{8292, []uint32{4096, 100, 4096}},
		{1 << 40, []uint32{4096, 100, 4096}},
	} {
		got := fillSegments(nil, src, tc.n)
		for i := range got {
			if got[i].Length != tc.want[i] || got[i].Handle != src[i].Handle || got[i].Offset != src[i].Offset {
				t.Errorf("fillSegments(%d) = %v, want lengths %v", tc.n, got, tc.want)
				break
			}
		}
	}
	dst := make([]Segment, 0, 3)
	if a := testing.AllocsPerRun(10, func() { dst = fillSegments(dst, src, 5000) }); a != 0 {
		t.Errorf("fillSegments allocates %v", a)
	}
}

func TestBuildReply(t *testing.T) {
	p, err := planReply(Message{Head: 120, Payload: 5000, DDP: true}, callWrite2, 1024)
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	h.BuildReply(callWrite2, p, 64)
	want := Header{XID: 3, Vers: 1, Credits: 64, Proc: ProcMsg,
		Writes: [][]Segment{{{Handle: 7, Length: 4096}, {Handle: 8, Length: 904}}}}
	if !equalHeaders(&h, &want) {
		t.Errorf("BuildReply = %+v, want %+v", h, want)
	}
	// The second Write chunk comes back unused; a Reply chunk not used comes
	// back with empty segments (RFC 8166 sections 4.3.2.2 and 4.3.3).
	p, _ = planReply(Message{Head: 120, Payload: 8000, DDP: true}, callTwoWrites, 1024)
	h.BuildReply(callTwoWrites, p, 1)
	if len(h.Writes) != 2 || h.Writes[0][0].Length != 8000 || h.Writes[1][0].Length != 0 || h.Writes[1][0].Handle != 8 {
		t.Errorf("two Write chunks: %+v", h.Writes)
	}
	p, _ = planReply(Message{Head: 200}, callReply, 1024)
	h.BuildReply(callReply, p, 1)
	if !h.HasReply || len(h.Reply) != 1 || h.Reply[0].Length != 0 || h.Reply[0].Handle != 9 || len(h.Writes) != 0 {
		t.Errorf("unused Reply chunk: %+v", h)
	}
	// Reuse does not allocate.
	if a := testing.AllocsPerRun(10, func() { h.BuildReply(callBoth, p, 1) }); a != 0 {
		t.Errorf("BuildReply allocates %v", a)
	}
}

func TestCheckReply(t *testing.T) {
	ok := func() *Header {
		return &Header{XID: 6, Vers: 1, Proc: ProcNoMsg,
			Writes: [][]Segment{{{Handle: 7, Length: 30000}}}, HasReply: true, Reply: []Segment{{Handle: 9, Length: 2000}}}
	}
	if err := ok().CheckReply(callBoth); err != nil {
		t.Fatalf("good reply: %v", err)
	}
	for name, mutate := range map[string]func(h *Header){
		"read list":                  func(h *Header) { h.Reads = []ReadSegment{{0, s1}} },
		"NOMSG without Reply chunk":  func(h *Header) { h.HasReply, h.Reply = false, nil },
		"Write chunk grew":           func(h *Header) { h.Writes[0][0].Length = 32769 },
		"Write chunk handle changed": func(h *Header) { h.Writes[0][0].Handle = 8 },
		"Write chunk segment added":  func(h *Header) { h.Writes[0] = append(h.Writes[0], Segment{Handle: 7}) },
		"extra Write chunk":          func(h *Header) { h.Writes = append(h.Writes, nil) },
		"Reply chunk grew":           func(h *Header) { h.Reply[0].Length = 8193 },
	} {
		h := ok()
		mutate(h)
		if err := h.CheckReply(callBoth); !errors.Is(err, ErrChunk) {
			t.Errorf("%s: err = %v, want ErrChunk", name, err)
		}
	}
	unexpected := &Header{Proc: ProcMsg, HasReply: true}
	if err := unexpected.CheckReply(callNone); !errors.Is(err, ErrChunk) {
		t.Errorf("Reply chunk not provided: %v", err)
	}
	if err := unexpected.CheckReply(nil); !errors.Is(err, ErrChunk) {
		t.Errorf("nil call: %v", err)
	}
	if err := (&Header{Proc: ProcError}).CheckReply(callNone); !errors.Is(err, ErrInvalid) {
		t.Errorf("RDMA_ERROR: %v", err)
	}
	// A reply may leave out the Write list and the Reply chunk (lenient).
	if err := (&Header{Proc: ProcMsg}).CheckReply(callBoth); err != nil {
		t.Errorf("bare reply: %v", err)
	}
}
