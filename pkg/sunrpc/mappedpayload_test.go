package sunrpc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestTCPMappedPayload: a DDP-eligible result that is a mapping of a file
// is written from the mapping (writev after the record mark and the head);
// once the file is truncated below it, the kernel's copy of the pages past
// the end fails (EFAULT, no SIGBUS: the kernel, not Go, touches them), the
// server closes the connection instead of sending a partial record, and
// answers again on a new one.
func TestTCPMappedPayload(t *testing.T) {
	const size = 256 << 10
	name := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("page cache "), size/11+1)[:size]
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	s := NewServer(quiet)
	s.Register(testProg, 1, []Handler{
		1: func(ctx context.Context, req *Request, res *Builder) error {
			res.Payload(mem)
			res.Uint32(0xdeadbeef)
			return nil
		},
	})
	addr, _ := serveTCP(t, s, TCPOptions{})
	get := func(ctx context.Context, c *Client) ([]byte, error) {
		var out []byte
		err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 1, Proc: 1, Args: func(b *Builder) {},
			Results: func(d *xdr.Decoder, placed int) error {
				out = bytes.Clone(d.Opaque(1 << 20))
				if v := d.Uint32(); d.Err() == nil && v != 0xdeadbeef {
					t.Errorf("tail word %#x", v)
				}
				return d.Err()
			}})
		return out, err
	}
	c := newTestClient(t, addr, ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := get(ctx, c)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("result from the mapping: %d bytes, %v", len(got), err)
	}
	if err := os.Truncate(name, 4096); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	if got, err := get(sctx, c); err == nil {
		t.Fatalf("a result past the end of the truncated file was answered (%d bytes)", len(got))
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := get(ctx, newTestClient(t, addr, ClientOptions{})); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the fault: %d bytes, %v", len(got), err)
	}
}
