package client

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestFakeCommitWaitsForCommitInProgress: a Commit called while another
// Commit of the same File is in progress (its COMMIT held in the server)
// must not report success before that COMMIT is done: the pending writes
// it would find are the other's. With a cancelled ctx it fails with ctx's
// error; without, it returns once both are done, the data stable.
func TestFakeCommitWaitsForCommitInProgress(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{})
	data := randBytes(256<<10, 21)
	file := c.OpenFile(fakeFile)
	if _, err := file.WriteAt(context.Background(), data, 0); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock() // the COMMIT handler waits for it
	locked := true
	defer func() {
		if locked {
			f.mu.Unlock()
		}
	}()
	first := make(chan error, 1)
	go func() { first <- file.Commit(context.Background()) }()
	deadline := time.Now().Add(time.Minute)
	for f.commits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first COMMIT did not reach the server")
		}
		time.Sleep(time.Millisecond)
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := file.Commit(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit while another is in progress, ctx cancelled: %v, want context.Canceled (not success: nothing is durable yet)", err)
	}
	second := make(chan error, 1)
	go func() { second <- file.Commit(context.Background()) }()

	locked = false
	f.mu.Unlock()
	for i, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("Commit %d: %v", i+1, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Commit %d did not return", i+1)
		}
	}
	f.mu.Lock()
	stable := bytes.Equal(f.stable, data)
	f.mu.Unlock()
	if !stable || file.Uncommitted() != 0 {
		t.Fatalf("after both Commits: stable data equal %v, %d bytes uncommitted", stable, file.Uncommitted())
	}
}

// TestFakeWriteStats: a verifier change at COMMIT is counted once and the
// re-sent bytes are counted per Client.
func TestFakeWriteStats(t *testing.T) {
	f := newFakeServer(64 << 10)
	c := fakeT(t, f, false, Options{})
	ctx := context.Background()
	data := randBytes(192<<10, 22)
	for range 2 {
		file := c.OpenFile(fakeFile)
		if _, err := file.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		f.rebootBeforeCommit.Store(1)
		if err := file.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ws := c.WriteStats(); ws.VerifierChanges != 2 || ws.ResentBytes != 2*uint64(len(data)) {
		t.Fatalf("WriteStats %+v, want 2 changes and %d bytes", ws, 2*len(data))
	}
}
