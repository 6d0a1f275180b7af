package fusefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// procCount counts the NFS calls of a mount by procedure, over all its
// connections (wrap each with conn; countCalls).
type procCount struct {
	mu sync.Mutex
	n  map[uint32]int
}

func newProcCount() *procCount { return &procCount{n: map[uint32]int{}} }

// countCalls returns a procCount and the dialer wrapper (mountWith's
// wrap) that counts every connection's calls in it.
func countCalls() (*procCount, func(sunrpc.DialFunc) sunrpc.DialFunc) {
	pc := newProcCount()
	return pc, wrapConns(pc.conn)
}

// conn returns ct counting its NFS calls in p.
func (p *procCount) conn(ct sunrpc.ClientTransport) sunrpc.ClientTransport {
	return &countedConn{ClientTransport: ct, p: p}
}

// countedConn is a sunrpc.ClientTransport that counts the NFS calls it
// carries in p.
type countedConn struct {
	sunrpc.ClientTransport
	p *procCount
}

func (c *countedConn) RoundTrip(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	if proc, ok := nfsProc(call); ok {
		c.p.mu.Lock()
		c.p.n[proc]++
		c.p.mu.Unlock()
	}
	return c.ClientTransport.RoundTrip(ctx, call)
}

// nfsProc returns the NFS procedure of c, false when c is not an NFS call
// (its call header, sunrpc.DecodeCallHeader, names another program).
func nfsProc(c *sunrpc.Call) (uint32, bool) {
	h, err := sunrpc.DecodeCallHeader(xdr.NewDecoder(c.Msg.Head))
	if err != nil || h.Prog != nfs3.Program {
		return 0, false
	}
	return h.Proc, true
}

func (p *procCount) get(proc uint32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[proc]
}

// TestKnownNames: in a directory the mount made, the LOOKUP the kernel
// sends before an O_CREAT|O_EXCL open is answered without an NFS LOOKUP
// (dirnames.go), while every answer stays what the server says: names
// created, renamed and removed through the mount are seen at once, a
// name another client created is seen once the directory's attribute
// timeout has passed, and an exclusive create of it fails with EEXIST
// and leaves it visible.
func TestKnownNames(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	pc, wrap := countCalls()
	// acdirmin=1: the directory's attributes (and so its known names)
	// are trusted for 1 s after each refresh
	dir, m := s.mountWith(t, mountopts.ProtoRDMA, "acdirmin=1,acdirmax=1", wrap)
	d := filepath.Join(dir, "made")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	lookups := pc.get(nfs3.ProcLookup)
	const files = 50
	for i := range files {
		f, err := os.OpenFile(filepath.Join(d, "f"+string(rune('A'+i%26))+string(rune('a'+i/26))), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := pc.get(nfs3.ProcLookup) - lookups; got != 0 {
		t.Errorf("%d NFS LOOKUPs for %d exclusive creates in a directory the mount made, want 0", got, files)
	}
	if got := pc.get(nfs3.ProcCreate); got < files {
		t.Errorf("%d NFS CREATEs, want at least %d", got, files)
	}

	// changes through the mount: the names follow
	if err := os.Rename(filepath.Join(d, "fAa"), filepath.Join(d, "renamed")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d, "fBa")); err != nil {
		t.Fatal(err)
	}
	made := m.sys.root.GetChild("made")
	for name, want := range map[string]bool{"fAa": false, "renamed": true, "fBa": false, "fCa": true} {
		// the kernel forgets its dentry, so the LOOKUP reaches us
		if errno := made.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT { // ENOENT: no dentry
			t.Fatalf("FUSE_NOTIFY_INVAL_ENTRY %s: %v", name, errno)
		}
		_, err := os.Lstat(filepath.Join(d, name))
		if got := err == nil; got != want || (err != nil && !errors.Is(err, os.ErrNotExist)) {
			t.Errorf("lstat %s: %v, want exists=%v", name, err, want)
		}
	}
	if err := os.Mkdir(filepath.Join(d, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "renamed"), filepath.Join(d, "sub", "moved")); err != nil {
		t.Fatal(err)
	}
	made.GetChild("sub").NotifyEntry("moved")
	if _, err := os.Lstat(filepath.Join(d, "sub", "moved")); err != nil {
		t.Errorf("after a rename into a directory the mount made: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d, "renamed")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lstat of a name renamed away: %v, want ENOENT", err)
	}

	// another client (here: the server's own file system) creates names;
	// once the directory's attribute timeout has passed, the mount sees
	// them
	for _, name := range []string{"outside", "taken"} {
		if err := os.WriteFile(filepath.Join(s.root, "made", name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := os.Lstat(filepath.Join(d, "outside"))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			t.Fatalf("a name another client created is still not seen after 5 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// whatever the mount believed of "taken", the server decides an
	// exclusive create, and the name is seen after it
	_, err := os.OpenFile(filepath.Join(d, "taken"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("exclusive create of a name another client made: %v, want EEXIST", err)
	}
	if _, err := os.Lstat(filepath.Join(d, "taken")); err != nil {
		t.Fatalf("lstat after EEXIST: %v", err)
	}
}
