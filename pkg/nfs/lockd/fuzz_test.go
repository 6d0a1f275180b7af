package lockd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzDispatch feeds arbitrary arguments to every NLM and NSM procedure of
// one Manager, in sequence (so that locks, queued requests and grants
// build up): no panic, and every error is GARBAGE_ARGS, PROC_UNAVAIL or
// NSM_NOTIFY's SYSTEM_ERR.
func FuzzDispatch(f *testing.F) {
	enc := func(m nlm.Message) []byte {
		e := xdr.NewEncoder(nil)
		m.Encode(e)
		return e.Bytes()
	}
	l := nlm.Lock{CallerName: "h", FH: []byte("fh"), OH: []byte("oh"), Svid: 1, Offset: 0, Length: 10}
	f.Add(false, uint8(nlm.ProcLock), enc(&nlm.LockArgs{Block: true, Exclusive: true, Lock: l}))
	f.Add(false, uint8(nlm.ProcTest), enc(&nlm.TestArgs{Exclusive: true, Lock: l}))
	f.Add(false, uint8(nlm.ProcUnlock), enc(&nlm.UnlockArgs{Lock: l}))
	f.Add(false, uint8(nlm.ProcCancel), enc(&nlm.CancArgs{Lock: l}))
	f.Add(false, uint8(nlm.ProcFreeAll), enc(&nlm.NotifyArgs{Name: "h"}))
	f.Add(false, uint8(nlm.ProcGrantedRes), enc(&nlm.Res{Cookie: []byte{1}}))
	f.Add(false, uint8(nlm.ProcLockMsg), enc(&nlm.LockArgs{Lock: l}))
	f.Add(true, uint8(nsm.ProcNotify), []byte{0, 0, 0, 1, 'h', 0, 0, 0, 0, 0, 0, 3})
	f.Add(true, uint8(nsm.ProcMon), make([]byte, 40))

	m, err := New(Options{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		CallTimeout: time.Millisecond,
		LookupPort: func(context.Context, string, uint32, uint32) (int, error) {
			return 0, errors.New("fuzz: no callbacks")
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	nlmProcs, nsmProcs := m.NLMHandlers(), m.NSMHandlers()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}
	f.Fuzz(func(t *testing.T, isNSM bool, proc uint8, args []byte) {
		procs := nlmProcs
		if isNSM {
			procs = nsmProcs
		}
		h := procs[int(proc)%len(procs)]
		if h == nil {
			return
		}
		req := &sunrpc.Request{Proc: uint32(proc) % uint32(len(procs)), Args: args, Peer: peer, Transport: "tcp"}
		b := sunrpc.NewBuilder(nil)
		err := h(context.Background(), req, b)
		if err != nil && !errors.Is(err, sunrpc.ErrGarbageArgs) && !errors.Is(err, sunrpc.ErrSystemErr) {
			t.Fatalf("proc %d: %v", proc, err)
		}
	})
}
