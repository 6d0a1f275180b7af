// Package fuseuring serves a FUSE connection over io_uring (FUSE over
// io_uring, Linux 6.14 and later built with CONFIG_FUSE_IO_URING) with
// go-fuse's ProtocolServer, so that file systems keep go-fuse's node API
// (fs.NewNodeFS) and change only their transport. It is a transport, not
// a FUSE implementation: go-fuse decodes and answers every request.
//
// The kernel interface is include/uapi/linux/fuse.h (protocol 7.42) and
// fs/fuse/dev_uring.c:
//
//   - INIT comes over /dev/fuse; the server offers FUSE_OVER_IO_URING,
//     which the kernel grants when the fuse module's enable_uring is Y
//     (EnableParam, Available).
//   - The ring has one queue per possible CPU; each queue has Entries
//     ring entries, each a header buffer (struct fuse_uring_req_header:
//     128 bytes of fuse_in_header/fuse_out_header, 128 of the opcode's
//     first argument, struct fuse_uring_ent_in_out) and a payload buffer
//     of at least the connection's max_write. An entry is registered with
//     IORING_OP_URING_CMD FUSE_IO_URING_CMD_REGISTER (struct
//     fuse_uring_cmd_req in the 80-byte command area of a 128-byte SQE,
//     sqe->addr an iovec[2] of the two buffers). The kernel sends
//     requests over the ring once every queue has registered an entry;
//     before that they come over /dev/fuse.
//   - A request completes the entry's command; the server answers into
//     the same buffers (fuse_out_header in the header, every out argument
//     in the payload, payload_sz their size) and submits
//     FUSE_IO_URING_CMD_COMMIT_AND_FETCH with the entry's commit_id, which
//     delivers the reply and gives the entry back for the next request.
//   - FORGET, BATCH_FORGET and INTERRUPT still come over /dev/fuse, read
//     by one goroutine; an INTERRUPT reaches the request it names through
//     the shared ProtocolServer, tried again while that request is still
//     on its way from the ring to go-fuse. Notifications
//     (fs.ServerCallbacks) are written to /dev/fuse.
//   - After INIT the server opens go-fuse's ".go-fuse-epoll-hack" file
//     and polls it, so that the kernel learns POLL is ENOSYS: Go's epoll
//     registration of a file of the mount from this process would
//     otherwise wait for a POLL answer holding a runtime P.
//
// # Threads
//
// The kernel copies a request into an entry in task work of the thread
// that submitted the entry's last command. Each queue therefore has one
// OS thread of its own, locked and never released (it ends with the
// queue), that owns the queue's io_uring (IORING_SETUP_SINGLE_ISSUER,
// IORING_SETUP_DEFER_TASKRUN: the task work runs when that thread waits
// in io_uring_enter). Were a thread that also calls into the mount
// (any Go thread of a process that uses its own mount) to submit, the
// task work for a request could wait on that very thread, blocked in the
// kernel on the request: a process stuck in D state that only a reboot
// ends. The queue's thread answers the requests Config.Inline takes
// itself and submits their COMMIT_AND_FETCH with its next wait, one
// io_uring_enter per request; the others (always SETLKW), and all but
// the last of requests that completed together, go to goroutines, which
// hand their entries back through an eventfd the thread reads on the
// ring. A request Config.Inline takes must not wait for another request
// of the mount: the queue's other requests wait behind it. Config.Inline
// is asked as each request comes, so it may take a request that usually
// answers alone only while the file system's state says it will; should
// it find otherwise, the request asks OnQueueThread and does not wait.
//
// # Shutdown
//
// The server stops when /dev/fuse reads ENODEV (unmount, or abort
// through fusectl: Abort, AbortConnection); buffers are released once
// the requests in flight are answered. Close unmounts and aborts when
// unmount fails.
package fuseuring
