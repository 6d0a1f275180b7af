package wakeups

import (
	"strings"
	"testing"
	"time"
)

// TestTraceHandOffs traces a ping-pong over unbuffered channels: each
// round trip parks the goroutine that waits and the other readies it, so
// there is at least one hand-off per round trip, named by the functions
// on either side.
func TestTraceHandOffs(t *testing.T) {
	const rounds = 500
	ping, pong := make(chan int), make(chan int)
	go echo(ping, pong)
	defer close(ping)
	start := time.Now()
	w, err := Trace(func() {
		for i := range rounds {
			ping <- i
			if v := <-pong; v != i {
				t.Errorf("echo %d, want %d", v, i)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.HandOffs < rounds || w.Unblocks < w.HandOffs {
		t.Fatalf("%d hand-offs of %d wake-ups for %d round trips: want at least one hand-off each", w.HandOffs, w.Unblocks, rounds)
	}
	named := 0
	var delay time.Duration
	for _, s := range w.Sites {
		if strings.Contains(s.Waker, "wakeups.echo") && strings.Contains(s.Wakee, "wakeups.TestTraceHandOffs") ||
			strings.Contains(s.Waker, "wakeups.TestTraceHandOffs") && strings.Contains(s.Wakee, "wakeups.echo") {
			named += s.N
			delay += s.Delay
		}
		if s.Delay < 0 {
			t.Fatalf("site %+v: negative delay", s)
		}
	}
	if named < rounds {
		t.Fatalf("%d wake-ups named by the ping-pong's functions, want at least %d; sites: %+v", named, rounds, w.Sites)
	}
	// Each woken goroutine ran after it was made runnable: the time
	// between is there, and below the trace's length.
	if delay <= 0 || delay > time.Since(start) {
		t.Fatalf("the ping-pong's wake-ups waited %v in total to run, over a %v trace", delay, time.Since(start))
	}
}

func echo(in <-chan int, out chan<- int) {
	for v := range in {
		out <- v
	}
}

// TestCounts reads the counts twice around a run of context switches
// (the ping-pong's goroutines park their threads now and then) and checks
// that every count is there and none goes back.
func TestCounts(t *testing.T) {
	c0, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if c0.Process() <= 0 || c0.Machine <= 0 || c0.KThreads <= 0 {
		t.Fatalf("counts %+v: want positive process, kernel threads' and machine's context switches", c0)
	}
	ping, pong := make(chan int), make(chan int)
	go echo(ping, pong)
	for i := range 1000 {
		ping <- i
		<-pong
	}
	close(ping)
	c1, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	d := c1.Sub(c0)
	if d.Voluntary < 0 || d.Involuntary < 0 || d.Machine < 0 {
		t.Fatalf("counts went back: %+v then %+v", c0, c1)
	}
	if d.Machine < d.Process() {
		t.Fatalf("machine's %d context switches fewer than this process's %d", d.Machine, d.Process())
	}
}
