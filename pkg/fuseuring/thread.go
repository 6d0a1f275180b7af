package fuseuring

import (
	"sync"

	"golang.org/x/sys/unix"
)

// queueThreads holds the thread IDs of the queues' threads of every
// Server of the process, for OnQueueThread.
var queueThreads struct {
	mu   sync.Mutex
	tids map[int]struct{}
}

// OnQueueThread reports whether the caller runs on the thread of a ring
// queue, that is, in a request that Config.Inline took. A file system
// whose request usually answers alone but may, in a rare case, wait for
// another request of the mount (an unlink for the RELEASE of a file just
// closed) asks it before it waits: on a queue's thread the other request
// may sit in the same queue behind this one, and must not be waited for.
// One gettid(2) and a map lookup.
func OnQueueThread() bool {
	tid := unix.Gettid()
	queueThreads.mu.Lock()
	_, ok := queueThreads.tids[tid]
	queueThreads.mu.Unlock()
	return ok
}

// enterQueueThread records the calling thread, locked to its goroutine,
// as a queue's thread until the returned function is called.
func enterQueueThread() (leave func()) {
	tid := unix.Gettid()
	queueThreads.mu.Lock()
	if queueThreads.tids == nil {
		queueThreads.tids = make(map[int]struct{})
	}
	queueThreads.tids[tid] = struct{}{}
	queueThreads.mu.Unlock()
	return func() {
		queueThreads.mu.Lock()
		delete(queueThreads.tids, tid)
		queueThreads.mu.Unlock()
	}
}
