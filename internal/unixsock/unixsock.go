// Package unixsock listens on a unix socket path that a successor process
// may bind again while this one still runs (a rolling upgrade of a
// DaemonSet whose pods share a host directory): the path is removed when
// the listener closes only if it still names the socket this listener
// bound, never a successor's.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// Listener is a unix listener that removes its path on Close only while
// the path is still its socket (same device and inode as at bind time).
type Listener struct {
	*net.UnixListener
	path     string
	dev, ino uint64
	once     sync.Once
}

// Listen removes a socket file left at path (a stale one, or a running
// predecessor's: that process keeps serving its accepted connections but
// is no longer found at path), binds network ("unix" or "unixpacket") at
// path and sets mode. Errors: the bind's, or the stat of the new socket.
func Listen(network, path string, mode os.FileMode) (*Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ul, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, err
	}
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(path, mode); err != nil {
		ul.Close()
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		ul.Close()
		return nil, fmt.Errorf("unixsock: %w", err)
	}
	return &Listener{UnixListener: ul, path: path, dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Close closes the listener and removes its path if the path still names
// this listener's socket. It may be called more than once.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if l.Owns() {
			_ = os.Remove(l.path)
		}
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Owns reports whether the listener's path still names its socket.
func (l *Listener) Owns() bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(l.path, &st); err != nil {
		return false
	}
	return uint64(st.Dev) == l.dev && st.Ino == l.ino
}
