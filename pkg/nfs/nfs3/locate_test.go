package nfs3

import "testing"

// LocateDDPResult finds the length word of READ data and the READLINK path
// exactly where their encoders put it, with and without attributes, and
// nothing in an error result or in results cut before the word.
func TestLocateDDPResult(t *testing.T) {
	data := []byte("some file data, 31 bytes long.")
	tests := []struct {
		name string
		proc uint32
		res  DDPMessage
		want bool // a result to locate
	}{
		{"read with attributes", ProcRead, &ReadRes{Status: OK, Attr: Attrs(sampleFattr(1)), EOF: true, Data: data}, true},
		{"read without attributes", ProcRead, &ReadRes{Status: OK, Data: data}, true},
		{"read of nothing", ProcRead, &ReadRes{Status: OK, Attr: Attrs(sampleFattr(1)), EOF: true}, true},
		{"read error", ProcRead, &ReadRes{Status: ErrIO, Attr: Attrs(sampleFattr(1))}, false},
		{"readlink with attributes", ProcReadlink, &ReadlinkRes{Status: OK, Attr: Attrs(sampleFattr(2)), Path: []byte("../target")}, true},
		{"readlink without attributes", ProcReadlink, &ReadlinkRes{Status: OK, Path: []byte("t")}, true},
		{"readlink error", ProcReadlink, &ReadlinkRes{Status: ErrInval}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head, _ := encodeSplit(tt.res)
			whole := encodeInline(tt.res)
			locate := LocateDDPResult(tt.proc)
			want := -1
			if tt.want {
				want = len(head) - 4
			}
			if at := locate(whole); at != want {
				t.Fatalf("located at %d, want %d (head %d bytes)", at, want, len(head))
			}
			if tt.want {
				if at := locate(whole[:want+3]); at != -1 {
					t.Fatalf("results cut before the length word: located at %d", at)
				}
			}
		})
	}
	bad := encodeInline(&ReadRes{Status: OK, Attr: Attrs(sampleFattr(1)), Data: data})
	bad[7] = 2 // attributes_follow neither FALSE nor TRUE
	if at := ReadResDataAt(bad); at != -1 {
		t.Fatalf("bad attributes_follow: located at %d", at)
	}
	for _, p := range []uint32{ProcGetattr, ProcWrite, ProcReaddir} {
		if LocateDDPResult(p) != nil {
			t.Fatalf("%s has a DDP-eligible result locator", ProcName(p))
		}
	}
}

// checkLocate is FuzzResults' check of a locator on msg: never past msg,
// and where the decoder, when msg decodes, says the item's length word is.
func checkLocate(t *testing.T, proc uint32, msg []byte) {
	locate := LocateDDPResult(proc)
	if locate == nil {
		return
	}
	at := locate(msg)
	if at >= 0 && at+4 > len(msg) {
		t.Fatalf("located at %d in %d bytes", at, len(msg))
	}
	v := newRes(proc).(DDPMessage)
	if _, err := decodeInto(v, msg, nil, false); err != nil {
		return
	}
	head, _ := encodeSplit(v)
	want := -1 // no item in an error result
	if statusOf(v) == OK {
		want = len(head) - 4
	}
	if at != want {
		t.Fatalf("located at %d, want %d (status %v)", at, want, statusOf(v))
	}
}

func statusOf(v DDPMessage) Status {
	switch r := v.(type) {
	case *ReadRes:
		return r.Status
	case *ReadlinkRes:
		return r.Status
	}
	return ErrServerFault
}
