package fusefs

import (
	"context"
	"testing"
	"time"
)

// A counted request paused (a lock call waiting out the server's grace
// period) is not waited for by close; it counts as held, and resuming
// while the gate is closed holds it until the gate opens again, when it
// counts in flight as before.
func TestGatePause(t *testing.T) {
	g := newGate(nil)
	g.enter(true)
	g.pause()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.close(ctx); err != nil {
		t.Fatalf("close with a paused request: %v", err)
	}
	if n := g.holding(); n != 1 {
		t.Fatalf("holding %d with a paused request, want 1", n)
	}
	resumed := make(chan struct{})
	go func() {
		g.resume()
		close(resumed)
	}()
	select {
	case <-resumed:
		t.Fatal("a paused request went on with the gate closed")
	case <-time.After(100 * time.Millisecond):
	}
	if n := g.holding(); n != 1 {
		t.Fatalf("holding %d with a request held at resume, want 1", n)
	}
	g.reopen()
	select {
	case <-resumed:
	case <-time.After(5 * time.Second):
		t.Fatal("the paused request still held after the gate opened")
	}
	g.mu.Lock()
	inflight, paused := g.inflight, g.paused
	g.mu.Unlock()
	if inflight != 1 || paused != 0 || g.holding() != 0 {
		t.Fatalf("after resume: %d in flight, %d paused, %d held; want 1, 0, 0", inflight, paused, g.holding())
	}
	g.leave(true)
	// in flight again: close waits for it
	g.enter(true)
	g.pause()
	g.resume()
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := g.close(short); err == nil {
		t.Fatal("close returned with a request in flight")
	}
}
