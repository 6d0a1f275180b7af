package csi

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keyLocks serialises the calls on one key (a volume name, a volume ID, a
// target path): the CSI spec lets a CO send concurrent calls for the same
// volume, and the operations here are not atomic on the server.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func newKeyLocks() *keyLocks { return &keyLocks{m: map[string]chan struct{}{}} }

// lock waits for key, until ctx ends (codes.Aborted then, which COs
// retry). The returned function unlocks.
func (l *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	for {
		l.mu.Lock()
		ch, busy := l.m[key]
		if !busy {
			ch = make(chan struct{})
			l.m[key] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.m, key)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, status.Errorf(codes.Aborted, "an operation on %q is in progress", key)
		}
	}
}
