package perftest

import (
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []request{
		{test: WriteBW, size: 1 << 20, iters: 1000, depth: 16},
		{test: SendLat, verify: true, size: 64, iters: 1, depth: 1},
		{test: ReadBW, size: MaxSize, iters: 1<<31 - 1, depth: MaxDepth},
	} {
		b := r.encode()
		if len(b) > verbs.MaxPrivateData {
			t.Fatalf("request of %d bytes", len(b))
		}
		got, err := decodeRequest(b)
		if err != nil || got != r {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
		}
	}
}

func TestRequestRejectsGarbage(t *testing.T) {
	good := (&request{test: SendBW, size: 1, iters: 1, depth: 1}).encode()
	for name, mutate := range map[string]func([]byte) []byte{
		"short":   func(b []byte) []byte { return b[:requestLen-1] },
		"magic":   func(b []byte) []byte { b[0] ^= 1; return b },
		"version": func(b []byte) []byte { b[4] = 9; return b },
		"test 0":  func(b []byte) []byte { b[5] = 0; return b },
		"test 5":  func(b []byte) []byte { b[5] = 5; return b },
	} {
		if _, err := decodeRequest(mutate(append([]byte(nil), good...))); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: error %v, want ErrProtocol", name, err)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	r := reply{rkey: 0x01020304, length: 1 << 20, addr: 7 << 40}
	got, err := decodeReply(r.encode())
	if err != nil || got != r {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if _, err := decodeReply([]byte("server")); !errors.Is(err, ErrProtocol) {
		t.Fatalf("error %v", err)
	}
}

func TestRejectReason(t *testing.T) {
	long := make([]byte, 2*verbs.MaxPrivateData)
	for i := range long {
		long[i] = 'x'
	}
	b := encodeReject(statusBadParams, string(long))
	if len(b) != verbs.MaxPrivateData || len(rejectReason(b)) != verbs.MaxPrivateData-8 {
		t.Fatalf("reject of %d bytes", len(b))
	}
	if rejectReason([]byte("nope")) != "" {
		t.Fatal("reason from foreign private data")
	}
}

func TestCtrlRoundTrip(t *testing.T) {
	m := ctrlMsg{kind: ctrlVerdict, value: verdictMismatch, arg: 1 << 33}
	var b [ctrlLen]byte
	m.put(b[:])
	got, err := parseCtrl(b[:])
	if err != nil || got != m {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	if _, err := parseCtrl(b[:8]); !errors.Is(err, ErrProtocol) {
		t.Fatalf("short: %v", err)
	}
	b[3] = 99
	if _, err := parseCtrl(b[:]); !errors.Is(err, ErrProtocol) {
		t.Fatalf("kind 99: %v", err)
	}
}
