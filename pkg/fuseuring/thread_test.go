package fuseuring

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// threadRecorder records, per opcode, whether the file system's
// GETATTRs and UNLINKs ran on a queue's thread (OnQueueThread).
type threadRecorder struct {
	fuse.RawFileSystem
	mu                    sync.Mutex
	getattrOn, getattrOff int
	unlinkOn, unlinkOff   int
}

func (r *threadRecorder) record(on, off *int) {
	q := OnQueueThread()
	r.mu.Lock()
	if q {
		*on++
	} else {
		*off++
	}
	r.mu.Unlock()
}

func (r *threadRecorder) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.record(&r.getattrOn, &r.getattrOff)
	return r.RawFileSystem.GetAttr(cancel, in, out)
}

func (r *threadRecorder) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	r.record(&r.unlinkOn, &r.unlinkOff)
	return r.RawFileSystem.Unlink(cancel, h, name)
}

// TestOnQueueThread: a request Config.Inline takes runs on a queue's
// thread (OnQueueThread true), one it does not take on a goroutine
// (false, and counted in Stats.Offloaded), and so does the test itself.
func TestOnQueueThread(t *testing.T) {
	setEnable(t, true)
	rec := &threadRecorder{}
	inline := func(opcode uint32) bool { return opcode != 10 } // all but FUSE_UNLINK
	dir, _, srv := mountWrapped(t, Config{Ring: true, Inline: inline}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		rec.RawFileSystem = raw
		return rec
	})
	if err := srv.RingError(); err != nil {
		t.Fatal(err)
	}
	if OnQueueThread() {
		t.Error("the test's goroutine is on a queue's thread")
	}
	before := srv.Stats()
	const n = 20
	for i := range n {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil { // no attribute timeout: a GETATTR
			t.Fatal(i, err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	st := srv.Stats()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.unlinkOn != 0 || rec.unlinkOff != n {
		t.Errorf("UNLINKs on a queue's thread %d, elsewhere %d; want 0 and %d", rec.unlinkOn, rec.unlinkOff, n)
	}
	// A GETATTR that came together with another request is offloaded
	// too; most come alone.
	if rec.getattrOn < n/2 {
		t.Errorf("GETATTRs on a queue's thread %d, elsewhere %d; want most of %d on it", rec.getattrOn, rec.getattrOff, n)
	}
	if off := st.Offloaded - before.Offloaded; off < n {
		t.Errorf("%d requests offloaded, want at least the %d UNLINKs", off, n)
	}
}
