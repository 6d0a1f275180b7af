package fusemount

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// delayListener is the export server's NFS listener whose connections
// can be paused for some procedures: a call of one of them, and what its
// connection brings after it, is held unread by the server until resumed
// (a slow server).
type delayListener struct {
	net.Listener
	mu      sync.Mutex
	procs   []uint32      // the procedures held while paused
	resumed chan struct{} // nil: not paused
	held    []uint32      // the procedures of the calls held since the last pause
}

func (l *delayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &delayConn{Conn: c, l: l}, nil
}

// pause holds the calls of procs from now on.
func (l *delayListener) pause(procs ...uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resumed == nil {
		l.resumed, l.held, l.procs = make(chan struct{}), nil, procs
	}
}

// resume lets the held reads go on.
func (l *delayListener) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resumed != nil {
		close(l.resumed)
		l.resumed = nil
	}
}

// heldCalls returns the procedures of the calls held since the last
// pause.
func (l *delayListener) heldCalls() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint32(nil), l.held...)
}

type delayConn struct {
	net.Conn
	l *delayListener
}

// Read holds a call of a paused procedure until resumed (one read a
// call: the client sends each in one write).
func (c *delayConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.mu.Lock()
	r := c.l.resumed
	if r != nil {
		// record mark, xid, CALL, RPC version, program, version,
		// procedure (RFC 5531 sections 9 and 11)
		p := uint32(1 << 31)
		if n >= 28 {
			p = binary.BigEndian.Uint32(b[24:])
		}
		if slices.Contains(c.l.procs, p) {
			c.l.held = append(c.l.held, p)
		} else {
			r = nil
		}
	}
	c.l.mu.Unlock()
	if r != nil {
		<-r
	}
	return n, err
}

// A handover while the new process is handling a MKDIR or an exclusive
// CREATE (the server is slow) when it asks the kernel to send again what
// the old process read (the old process exits late): the kernel sends
// that request again too (FUSE_UNIQUE_RESEND), and the new process
// answers the copy with the request's reply instead of handling it
// again, which would fail with EEXIST.
func TestHandoverResendInFlight(t *testing.T) {
	ops := map[string]func(path string) error{
		"mkdir": func(path string) error { return os.Mkdir(path, 0o755) },
		"create": func(path string) error {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				err = f.Close()
			}
			return err
		},
	}
	proc := map[string]uint32{"mkdir": 9, "create": 8} // NFSPROC3_MKDIR, NFSPROC3_CREATE
	for _, name := range []string{"mkdir", "create"} {
		op := ops[name]
		t.Run(name, func(t *testing.T) {
			testenv.NeedRootFUSE(t)
			var dl *delayListener
			e := exporttest.Start(t, exporttest.Options{Node: "n", WrapNFS: func(l net.Listener) net.Listener {
				dl = &delayListener{Listener: l}
				return dl
			}})
			t.Cleanup(dl.resume)
			h := newHandoverEnvExport(t, e, e.TCPOptions()+",nolock")
			lr, lw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			// GOGC=off: no finalizer closes the old process's end of the
			// handover socket while it lingers
			p0, ready := startMountEnv(t, h.cfg(0, "v0"), false, []string{lingerEnv + "=4", "GOGC=off"}, lr)
			ready()
			lr.Close()
			var once sync.Once
			exit0 := func() { once.Do(func() { lw.Close() }) }
			t.Cleanup(exit0)
			d := filepath.Join(h.dir, "d")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			p1 := startMount(t, h.cfg(1, "v1"))
			// the old process reads requests until it exits, and holds
			// them (its gate): stopped, it reads none, and the new
			// process serves alone; nothing is resent while it lives.
			// The server holds the MKDIR or CREATE the new process
			// sends.
			if err := p0.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			cont := func() { _ = p0.cmd.Process.Signal(syscall.SIGCONT) }
			t.Cleanup(cont)
			time.Sleep(100 * time.Millisecond)
			dl.pause(proc[name])
			done := make(chan error, 1)
			go func() { done <- op(filepath.Join(d, "new")) }()
			for deadline := time.Now().Add(10 * time.Second); !slices.Contains(dl.heldCalls(), proc[name]); {
				select {
				case err := <-done:
					t.Fatalf("%s returned %v with the server paused", name, err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the %s did not reach the server (calls held: %v)", name, dl.heldCalls())
				}
				time.Sleep(time.Millisecond)
			}
			cont()
			exit0() // the old process exits: the new one asks for the resend
			if err := p0.wait(t, 30*time.Second); err != nil {
				t.Fatalf("old mount process: %v", err)
			}
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p1.log.String(), "sends again"); {
				if time.Now().After(deadline) {
					t.Fatalf("the new process did not ask for the resend:\n%s", p1.log.String())
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // the copy is read
			dl.resume()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s across the resend: %v (its copy was handled again)", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s stuck after the resend", name)
			}
			if _, err := os.Stat(filepath.Join(h.root, "d", "new")); err != nil {
				t.Fatalf("on the server: %v", err)
			}
			// the requests after the copies end the tracking, which logs
			// what became of the copies
			for i := 0; !strings.Contains(p1.log.String(), "1 joined to the request in flight"); i++ {
				if i == 1000 {
					t.Fatalf("the new process did not join the copy to its request:\n%s", p1.log.String())
				}
				_, _ = os.Stat(filepath.Join(d, "probe"+strconv.Itoa(i)))
				time.Sleep(10 * time.Millisecond)
			}
			logHandovers(t, p0, p1)
		})
	}
}
