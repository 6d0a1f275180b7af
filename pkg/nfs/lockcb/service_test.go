package lockcb

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// mountProc stands in for a mount process: it records the callbacks it
// is given and answers GRANTED with stat, after delay.
type mountProc struct {
	stat  nlm.Stat
	delay time.Duration

	mu    sync.Mutex
	calls []Message
}

func (p *mountProc) handle(m Message) uint32 {
	time.Sleep(p.delay)
	p.mu.Lock()
	p.calls = append(p.calls, m)
	p.mu.Unlock()
	if m.Prog == nsm.Program {
		return 0
	}
	return uint32(p.stat)
}

func (p *mountProc) got() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// startService runs a Service on a new socket and a loopback port, with
// an rpcbind that refuses connections, until the test ends.
func startService(t *testing.T, sock string) *Service {
	t.Helper()
	return startServiceWith(t, sock, "127.0.0.1:1")
}

// startServiceWith is startService with the rpcbind at rb.
func startServiceWith(t *testing.T, sock, rb string) *Service {
	t.Helper()
	s := &Service{Socket: sock, RPCBind: rb, Listen: "127.0.0.1:0", AnswerTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error("Run:", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatal("Run:", err)
	}
	return s
}

func testArgs(oh string) []byte {
	a := nlm.TestArgs{Cookie: []byte{1, 2}, Exclusive: true, Lock: nlm.Lock{CallerName: "server", FH: []byte{9, 9, 9, 9}, OH: []byte(oh), Svid: 42, Offset: 0, Length: 10}}
	var e xdr.Encoder
	a.Encode(&e)
	return e.Bytes()
}

func notifyArgs(monName string) []byte {
	a := nsm.StatChge{MonName: monName, State: 3}
	var e xdr.Encoder
	a.Encode(&e)
	return e.Bytes()
}

// rpcCall calls prog/proc on the service's TCP port with raw XDR args;
// results gets the reply's results.
func rpcCall(t *testing.T, s *Service, prog, vers, proc uint32, args []byte, results func(*xdr.Decoder, int) error) error {
	t.Helper()
	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(s.Port()), sunrpc.TCPOptions{}), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, sunrpc.CallSpec{Prog: prog, Vers: vers, Proc: proc,
		Args:    func(b *sunrpc.Builder) { b.Fixed(args) },
		Results: results, MaxReplySize: 4096})
}

// granted calls GRANTED for a lock of owner handle oh and returns the
// answer.
func granted(t *testing.T, s *Service, oh string) (nlm.Stat, error) {
	t.Helper()
	var res nlm.Res
	err := rpcCall(t, s, nlm.Program, nlm.Version, nlm.ProcGranted, testArgs(oh), func(d *xdr.Decoder, _ int) error { return res.Decode(d) })
	if err == nil && string(res.Cookie) != "\x01\x02" {
		t.Errorf("GRANTED answered cookie %x, want the call's 0102", res.Cookie)
	}
	return res.Stat, err
}

func count(s *Service, proc, result string) uint64 {
	for _, c := range s.Counts() {
		if c.Proc == proc && c.Result == result {
			return c.N
		}
	}
	return 0
}

// TestRouting: GRANTED goes to the process whose tag ends the lock's oh
// and is answered with that process's answer; a lock of no attached
// process is denied; a process that does not answer in time makes it
// SYSTEM_ERR (the server calls again); GRANTED_MSG is routed the same way
// after its void reply; SM_NOTIFY goes to the processes holding locks on
// the server named or calling; each outcome is counted.
func TestRouting(t *testing.T) {
	s := startService(t, filepath.Join(t.TempDir(), "lockd.sock"))
	p1, p2, slow := &mountProc{stat: nlm.Granted}, &mountProc{stat: nlm.Denied}, &mountProc{stat: nlm.Granted, delay: time.Second}
	a1 := Attach(s.Socket, "100", p1.handle)
	defer a1.Close()
	a2 := Attach(s.Socket, "200", p2.handle)
	defer a2.Close()
	a3 := Attach(s.Socket, "300", slow.handle)
	defer a3.Close()
	a1.SetServers([]string{"srv-a"})
	a2.SetServers([]string{"srv-b", "10.1.2.3"})
	waitFor(t, "three processes attached", func() bool { return slices.Equal(s.Attached(), []string{"100", "200", "300"}) })

	if st, err := granted(t, s, "7@node/100"); err != nil || st != nlm.Granted {
		t.Errorf("GRANTED for process 100 = %v, %v; want NLM4_GRANTED", st, err)
	}
	if st, err := granted(t, s, "7@node/200"); err != nil || st != nlm.Denied {
		t.Errorf("GRANTED for process 200 = %v, %v; want its NLM4_DENIED", st, err)
	}
	for _, oh := range []string{"7@node/999", "no-tag", "7@node/"} {
		if st, err := granted(t, s, oh); err != nil || st != nlm.Denied {
			t.Errorf("GRANTED for oh %q = %v, %v; want NLM4_DENIED", oh, st, err)
		}
	}
	if _, err := granted(t, s, "7@node/300"); !errors.Is(err, sunrpc.ErrSystemErr) {
		t.Errorf("GRANTED for a process that does not answer in time: %v, want SYSTEM_ERR", err)
	}
	if g := p1.got(); len(g) != 1 || g[0].Proc != nlm.ProcGranted || string(g[0].Args) != string(testArgs("7@node/100")) {
		t.Errorf("process 100 got %+v, want the one GRANTED", g)
	} else if host, _, err := net.SplitHostPort(g[0].Peer); err != nil || host != "127.0.0.1" {
		t.Errorf("process 100 got peer %q, want the caller's 127.0.0.1:PORT", g[0].Peer)
	}
	if len(p2.got()) != 1 {
		t.Errorf("process 200 got %d calls, want 1", len(p2.got()))
	}

	// bad arguments: GARBAGE_ARGS, nothing routed
	if err := rpcCall(t, s, nlm.Program, nlm.Version, nlm.ProcGranted, []byte{0, 0, 0}, nil); !errors.Is(err, sunrpc.ErrGarbageArgs) {
		t.Errorf("GRANTED with bad arguments: %v, want GARBAGE_ARGS", err)
	}
	if err := rpcCall(t, s, nlm.Program, nlm.Version, nlm.ProcTest, testArgs("x/100"), nil); !errors.Is(err, sunrpc.ErrProcUnavail) {
		t.Errorf("TEST: %v, want PROC_UNAVAIL", err)
	}

	if err := rpcCall(t, s, nlm.Program, nlm.Version, nlm.ProcGrantedMsg, testArgs("8@node/100"), nil); err != nil {
		t.Fatal("GRANTED_MSG:", err)
	}
	waitFor(t, "GRANTED_MSG routed", func() bool { return len(p1.got()) == 2 })
	if g := p1.got()[1]; g.Proc != nlm.ProcGrantedMsg {
		t.Errorf("process 100 got proc %d, want GRANTED_MSG", g.Proc)
	}

	if err := rpcCall(t, s, nsm.Program, nsm.Version, nsm.ProcNotify, notifyArgs("srv-b"), nil); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
	waitFor(t, "SM_NOTIFY routed", func() bool { return len(p2.got()) == 2 })
	// from 127.0.0.1, naming a server no process holds locks on
	if err := rpcCall(t, s, nsm.Program, nsm.Version, nsm.ProcNotify, notifyArgs("srv-z"), nil); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
	waitFor(t, "SM_NOTIFY counted", func() bool { return count(s, "SM_NOTIFY", ResultUnrouted) == 1 })
	if len(p1.got()) != 2 {
		t.Errorf("process 100 (servers srv-a) got %d calls, want no SM_NOTIFY", len(p1.got())-2)
	}

	waitFor(t, "slow answer counted", func() bool { return count(s, "GRANTED", ResultFailed) == 1 })
	for _, c := range []struct {
		proc, result string
		n            uint64
	}{
		{"GRANTED", ResultGranted, 1}, {"GRANTED", ResultDenied, 1}, {"GRANTED", ResultUnrouted, 3}, {"GRANTED", ResultFailed, 1},
		{"GRANTED_MSG", ResultGranted, 1}, {"SM_NOTIFY", ResultDelivered, 1}, {"SM_NOTIFY", ResultUnrouted, 1},
	} {
		if n := count(s, c.proc, c.result); n != c.n {
			t.Errorf("count %s %s = %d, want %d (all: %+v)", c.proc, c.result, n, c.n, s.Counts())
		}
	}
}

// TestRelay: a lock server of the node relays the callbacks it received
// over the socket and gets the process's answer; SM_NOTIFY relayed by
// address reaches the processes whose servers include it.
func TestRelay(t *testing.T) {
	s := startService(t, filepath.Join(t.TempDir(), "lockd.sock"))
	p := &mountProc{stat: nlm.Granted}
	a := Attach(s.Socket, "4242", p.handle)
	defer a.Close()
	a.SetServers([]string{"10.1.2.3"})
	waitFor(t, "attached", func() bool { return len(s.Attached()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Relay(ctx, s.Socket, nlm.Program, nlm.ProcGranted, "10.1.2.3:700", testArgs("1@n/4242"))
	if err != nil || nlm.Stat(st) != nlm.Granted {
		t.Errorf("relayed GRANTED = %v, %v; want NLM4_GRANTED", st, err)
	}
	if st, err := Relay(ctx, s.Socket, nlm.Program, nlm.ProcGranted, "10.1.2.3:700", testArgs("1@n/1")); err != nil || nlm.Stat(st) != nlm.Denied {
		t.Errorf("relayed GRANTED for no process = %v, %v; want NLM4_DENIED", st, err)
	}
	if _, err := Relay(ctx, s.Socket, nsm.Program, nsm.ProcNotify, "10.1.2.3:700", notifyArgs("server.example")); err != nil {
		t.Errorf("relayed SM_NOTIFY: %v", err)
	}
	if _, err := Relay(ctx, s.Socket, nlm.Program, nlm.ProcTest, "10.1.2.3:700", testArgs("1@n/4242")); !errors.Is(err, ErrNotDelivered) {
		t.Errorf("relayed TEST: %v, want ErrNotDelivered", err)
	}
	g := p.got()
	if len(g) != 2 || g[0].Peer != "10.1.2.3:700" || g[1].Prog != nsm.Program {
		t.Errorf("process got %+v, want the GRANTED and the SM_NOTIFY from 10.1.2.3:700", g)
	}
	if _, err := Relay(ctx, filepath.Join(t.TempDir(), "none.sock"), nlm.Program, nlm.ProcGranted, "10.1.2.3:700", testArgs("1@n/4242")); err == nil {
		t.Error("relay to no service succeeded")
	}
}

// TestBadMessageClosesConnection: a packet that does not decode ends the
// connection that sent it, and the service goes on.
func TestBadMessageClosesConnection(t *testing.T) {
	s := startService(t, filepath.Join(t.TempDir(), "lockd.sock"))
	for _, b := range [][]byte{{0, 0, 0, 9}, {0, 0, 0, 1, 0, 0, 1, 0}, {1}, make([]byte, MaxMessage+100)} {
		c, err := net.Dial("unixpacket", s.Socket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("after %d bad bytes: read %v, want the connection closed", len(b), err)
		}
		c.Close()
	}
	p := &mountProc{stat: nlm.Granted}
	a := Attach(s.Socket, "5", p.handle)
	defer a.Close()
	waitFor(t, "attached", func() bool { return len(s.Attached()) == 1 })
	if st, err := granted(t, s, "1@n/5"); err != nil || st != nlm.Granted {
		t.Errorf("GRANTED after bad messages = %v, %v", st, err)
	}
}

// TestReattach: a process attached to a service that restarts (the
// mounter restarting) attaches again and gets its callbacks.
func TestReattach(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lockd.sock")
	s1 := &Service{Socket: sock, RPCBind: "127.0.0.1:1", Listen: "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s1.Run(ctx) }()
	<-s1.Ready()
	p := &mountProc{stat: nlm.Granted}
	a := Attach(sock, "77", p.handle)
	defer a.Close()
	waitFor(t, "attached", func() bool { return len(s1.Attached()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "detached", func() bool { return !a.Attached() })
	s2 := startService(t, sock)
	waitFor(t, "attached again", func() bool { return slices.Equal(s2.Attached(), []string{"77"}) })
	if st, err := granted(t, s2, "1@n/77"); err != nil || st != nlm.Granted {
		t.Errorf("GRANTED after the restart = %v, %v", st, err)
	}
}

func TestOwnerTag(t *testing.T) {
	for oh, want := range map[string]string{
		"123@host/4567": "4567", "a/b/c": "c", "nothing": "", "x/": "", "": "",
		"1@h/" + string(make([]byte, MaxTag+1)): "",
	} {
		if got := OwnerTag([]byte(oh)); got != want {
			t.Errorf("OwnerTag(%q) = %q, want %q", oh, got, want)
		}
	}
}
