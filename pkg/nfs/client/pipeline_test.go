package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

func fakeT(t *testing.T, f *fakeServer, place bool, opts Options) *Client {
	t.Helper()
	c, err := newFakeClient(f, place, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFakeSizes(t *testing.T) {
	for _, tc := range []struct {
		srv  uint32
		opt  int
		want int
	}{
		{64 << 10, 0, 64 << 10},
		{64 << 20, 0, MaxIOSize},
		{64 << 20, 256 << 10, 256 << 10},
		{64 << 10, 1 << 20, 64 << 10},
		{100000, 0, 98304}, // whole pages
		{512, 0, 512},
	} {
		c := fakeT(t, newFakeServer(tc.srv), false, Options{RSize: tc.opt, WSize: tc.opt})
		if c.RSize() != tc.want || c.WSize() != tc.want {
			t.Errorf("server %d option %d: rsize %d wsize %d, want %d", tc.srv, tc.opt, c.RSize(), c.WSize(), tc.want)
		}
	}
}

func TestFakePipelinedWriteRead(t *testing.T) {
	for _, place := range []bool{false, true} {
		t.Run(fmt.Sprintf("placed=%v", place), func(t *testing.T) {
			f := newFakeServer(64 << 10)
			f.delay = time.Millisecond
			c := fakeT(t, f, place, Options{Window: 4})
			ctx := context.Background()
			data := randBytes(1<<20+123, 7)
			file := c.OpenFile(fakeFile)
			n, err := file.WriteAt(ctx, data, 1000)
			if n != len(data) || err != nil {
				t.Fatalf("WriteAt: %d %v", n, err)
			}
			if got := f.writes.Load(); got != 17 {
				t.Errorf("%d WRITEs, want 17 (wsize 64 KiB)", got)
			}
			if m := f.maxInflight.Load(); m < 2 || m > 4 {
				t.Errorf("max WRITEs in flight %d, want 2..4 (window 4)", m)
			}
			if f.noPayloadWrites.Load() != 0 || f.noMaxReply.Load() != 0 {
				t.Errorf("%d WRITEs without DDP payload, %d calls without MaxReplySize", f.noPayloadWrites.Load(), f.noMaxReply.Load())
			}
			if file.Uncommitted() != len(data) {
				t.Errorf("uncommitted %d, want %d", file.Uncommitted(), len(data))
			}
			if err := file.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if file.Uncommitted() != 0 || file.Resent() != 0 {
				t.Errorf("after commit: uncommitted %d resent %d", file.Uncommitted(), file.Resent())
			}
			if !bytes.Equal(f.stable[1000:], data) || !bytes.Equal(f.stable[:1000], make([]byte, 1000)) {
				t.Fatal("stable data differs")
			}
			f.maxInflight.Store(0)
			got := make([]byte, len(data)+5000)
			n, err = file.ReadAt(ctx, got, 1000)
			if n != len(data) || err != io.EOF || !bytes.Equal(got[:n], data) {
				t.Fatalf("ReadAt: %d %v", n, err)
			}
			if m := f.maxInflight.Load(); m < 2 || m > 4 {
				t.Errorf("max READs in flight %d, want 2..4", m)
			}
			if p := f.placed.Load(); place != (p > 0) {
				t.Errorf("%d READ replies placed", p)
			}
		})
	}
}

func TestFakeReadEOFAtChunkBoundary(t *testing.T) {
	f := newFakeServer(64 << 10)
	f.data = randBytes(128<<10, 3)
	c := fakeT(t, f, false, Options{})
	got := make([]byte, 512<<10)
	n, err := c.ReadAt(context.Background(), fakeFile, got, 0)
	if n != 128<<10 || err != io.EOF || !bytes.Equal(got[:n], f.data) {
		t.Fatalf("ReadAt: %d %v", n, err)
	}
	n, err = c.ReadAt(context.Background(), fakeFile, got[:128<<10], 0)
	if n != 128<<10 || err != nil {
		t.Fatalf("exact ReadAt: %d %v", n, err)
	}
	n, err = c.ReadAt(context.Background(), fakeFile, got[:10], 1<<40)
	if n != 0 || err != io.EOF {
		t.Fatalf("ReadAt past EOF: %d %v", n, err)
	}
}

func TestFakeShortReadsAndWrites(t *testing.T) {
	f := newFakeServer(64 << 10)
	f.maxReply = 10000
	c := fakeT(t, f, false, Options{})
	ctx := context.Background()
	data := randBytes(300000, 5)
	file := c.OpenFile(fakeFile)
	if n, err := file.WriteAt(ctx, data, 0); n != len(data) || err != nil {
		t.Fatalf("WriteAt: %d %v", n, err)
	}
	if err := file.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := file.ReadAt(ctx, got, 0); n != len(data) || err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAt: %d %v", n, err)
	}
}

// TestFakeVerifierChange: the server reboots (new write verifier, unstable
// data lost) before COMMIT; Commit must re-send everything.
func TestFakeVerifierChange(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{})
	ctx := context.Background()
	data := randBytes(300<<10, 11)
	file := c.OpenFile(fakeFile)
	if _, err := file.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	f.rebootBeforeCommit.Store(1)
	if err := file.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if file.Resent() != uint64(len(data)) {
		t.Errorf("re-sent %d bytes, want %d", file.Resent(), len(data))
	}
	if file.Uncommitted() != 0 {
		t.Errorf("uncommitted %d after Commit", file.Uncommitted())
	}
	if !bytes.Equal(f.stable, data) {
		t.Fatal("stable data differs after the re-send")
	}
}

// TestFakeVerifierChangeMidStream: the server reboots after 2 of 5 WRITEs;
// the COMMIT verifier matches only the last 3, so only the first 2 are
// re-sent.
func TestFakeVerifierChangeMidStream(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{Window: 1})
	ctx := context.Background()
	data := randBytes(5*64<<10, 13)
	file := c.OpenFile(fakeFile)
	f.rebootAfterWrites.Store(2)
	if _, err := file.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if file.Resent() != 2*64<<10 {
		t.Errorf("re-sent %d bytes, want %d", file.Resent(), 2*64<<10)
	}
	if !bytes.Equal(f.stable, data) {
		t.Fatal("stable data differs")
	}
}

func TestFakeUncommittedBound(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{MaxUncommitted: 256 << 10})
	ctx := context.Background()
	file := c.OpenFile(fakeFile)
	data := randBytes(1<<20, 17)
	for off := 0; off < len(data); off += 100 << 10 {
		end := min(off+100<<10, len(data))
		if _, err := file.WriteAt(ctx, data[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
		if u := file.Uncommitted(); u > 256<<10 {
			t.Fatalf("uncommitted %d > bound", u)
		}
	}
	if f.commits.Load() < 3 {
		t.Errorf("%d COMMITs, want >= 3", f.commits.Load())
	}
	if err := file.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.stable, data) {
		t.Fatal("stable data differs")
	}
	// One WriteAt larger than the bound is split.
	f2 := newFakeServer(64 << 10)
	c2 := fakeT(t, f2, false, Options{MaxUncommitted: 128 << 10})
	file2 := c2.OpenFile(fakeFile)
	if _, err := file2.WriteAt(ctx, data, 0); err != nil || file2.Uncommitted() > 128<<10 {
		t.Fatalf("big WriteAt: %v, uncommitted %d", err, file2.Uncommitted())
	}
	if err := file2.Commit(ctx); err != nil || !bytes.Equal(f2.stable, data) {
		t.Fatalf("commit: %v", err)
	}
}

func TestFakeErrors(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{JukeboxDelay: time.Millisecond})
	ctx := context.Background()
	stale := nfs3.MustFH([]byte("gone"))
	_, err := c.ReadAt(ctx, stale, make([]byte, 300<<10), 0)
	if !errors.Is(err, nfs3.ErrStale) || !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("ReadAt of a stale handle: %v", err)
	}
	if _, err := c.OpenFile(stale).WriteAt(ctx, make([]byte, 300<<10), 0); !errors.Is(err, nfs3.ErrStale) {
		t.Fatalf("WriteAt of a stale handle: %v", err)
	}
	f.jukebox.Store(2)
	if _, err := c.Getattr(ctx, fakeFile); err != nil {
		t.Fatalf("GETATTR after JUKEBOX: %v", err)
	}
	f.jukebox.Store(1000)
	c2 := fakeT(t, f, false, Options{JukeboxDelay: time.Hour})
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c2.Getattr(cctx, fakeFile); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nfs3.ErrJukebox) {
		t.Fatalf("GETATTR with endless JUKEBOX: %v", err)
	}
}

func TestFakeReaddirplusBadCookie(t *testing.T) {
	f := newFakeServer(64 << 10)
	for i := range 50 {
		f.names = append(f.names, fmt.Sprintf("n%02d", i))
	}
	c := fakeT(t, f, false, Options{})
	ctx := context.Background()
	f.badCookieAt.Store(20)
	var got []string
	for e, err := range c.Readdirplus(ctx, fakeDir) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name)
	}
	if len(got) != 50 {
		t.Fatalf("%d entries after a BAD_COOKIE restart, want 50: %v", len(got), got)
	}
	for i, n := range got {
		if n != f.names[i] {
			t.Fatalf("entry %d %q, want %q", i, n, f.names[i])
		}
	}
}

// TestFakeReadEOFBeforeEarlierChunks: the chunk that meets the end of the
// file finishes first; the earlier chunks still in flight must complete
// and count (cancelling them at EOF would make the read come back
// short).
func TestFakeReadEOFBeforeEarlierChunks(t *testing.T) {
	f := newFakeServer(64 << 10)
	f.data = make([]byte, 4*64<<10)
	for i := range f.data {
		f.data[i] = byte(i * 7)
	}
	f.slowReadsBelow.Store(3 * 64 << 10) // every chunk but the last and the one past EOF is slow
	c := fakeT(t, f, false, Options{Window: 8})
	buf := make([]byte, 6*64<<10)
	n, err := c.ReadAt(context.Background(), fakeFile, buf, 0)
	if n != len(f.data) || err != io.EOF || !bytes.Equal(buf[:n], f.data) {
		t.Fatalf("ReadAt: %d, %v; want %d bytes and EOF", n, err, len(f.data))
	}
}
