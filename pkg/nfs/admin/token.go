package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// The bearer token is a secret: nothing in this package puts it in an
// error, a log line or a URL; errors name the token file, never its
// content.

// TokenSource gives the bearer token of the admin API. Client and the
// handler ask it at every request, so that a rotated token takes effect
// without a restart.
type TokenSource interface {
	// Token returns the current token; an error when there is none.
	Token() (string, error)
}

// StaticToken is a TokenSource of one token.
type StaticToken string

// Token returns t, or ErrNoToken when it is empty.
func (t StaticToken) Token() (string, error) {
	if t == "" {
		return "", ErrNoToken
	}
	return string(t), nil
}

// RotationGrace is how long a TokenFile's handler still accepts the
// token the file held before it changed: Kubernetes updates a Secret's
// files in each pod on that pod's kubelet's schedule (its sync period and
// cache, about a minute by default), so the controller and the server do
// not see a rotated token at the same moment.
const RotationGrace = 3 * time.Minute

// TokenFile is a TokenSource reading a file that holds the token
// (surrounding white space trimmed), such as a Kubernetes Secret's file.
// It checks the file at each Token (one stat(2), following symlinks) and
// reads it again when it changed: kubelet's update of a Secret volume
// (new files in a new directory, then an atomic rename of the "..data"
// symlink) is taken at once. A file that went missing or empty keeps the
// last token, logged once.
type TokenFile struct {
	path  string
	grace time.Duration // RotationGrace

	mu      sync.Mutex
	stamp   fileStamp
	token   string
	prev    string    // the token before the last change
	changed time.Time // when the last change was seen
	bad     bool      // a failed reread was logged
}

// fileStamp identifies a version of a file.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

// NewTokenFile reads the token in path; an error when it cannot be read
// or is empty.
func NewTokenFile(path string) (*TokenFile, error) {
	f := &TokenFile{path: path, grace: RotationGrace}
	st, tok, err := f.read()
	if err != nil {
		return nil, err
	}
	f.stamp, f.token = st, tok
	return f, nil
}

// Path returns the token file's path.
func (f *TokenFile) Path() string { return f.path }

// Token returns the file's token, read again when the file changed.
func (f *TokenFile) Token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	return f.token, nil
}

// previous returns the token the file held before its last change, while
// within RotationGrace of that change; "" otherwise.
func (f *TokenFile) previous() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prev != "" && time.Since(f.changed) > f.grace {
		f.prev = ""
	}
	return f.prev
}

// accepts tells whether got is the file's token, or the one before it
// within RotationGrace of the change (the handler's check; each compared
// in constant time).
func (f *TokenFile) accepts(got string) bool {
	f.mu.Lock()
	f.refreshLocked()
	cur, prev := f.token, f.prev
	if prev != "" && time.Since(f.changed) > f.grace {
		f.prev, prev = "", ""
	}
	f.mu.Unlock()
	return tokenEqual(got, cur) || (prev != "" && tokenEqual(got, prev))
}

// refreshLocked reads the file again when its stamp changed. f.mu is held.
func (f *TokenFile) refreshLocked() {
	st, err := stampOf(f.path)
	if err == nil && st == f.stamp {
		return
	}
	var tok string
	if err == nil {
		st, tok, err = f.read()
	}
	if err != nil {
		if !f.bad {
			f.bad = true
			klog.InfoS("admin: token file unreadable: keeping the last token", "file", f.path, "err", err)
		}
		return
	}
	f.bad = false
	f.stamp = st
	if tok != f.token {
		f.prev, f.token, f.changed = f.token, tok, time.Now()
		klog.InfoS("admin: token rotated", "file", f.path)
	}
}

// read reads the token and the stamp of the file it was read from.
func (f *TokenFile) read() (fileStamp, string, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return fileStamp{}, "", fmt.Errorf("admin token: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return fileStamp{}, "", fmt.Errorf("admin token: %w", err)
	}
	if fi.Size() > maxBody {
		return fileStamp{}, "", fmt.Errorf("admin token file %s: %d bytes, too large for a token", f.path, fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxBody))
	if err != nil {
		return fileStamp{}, "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fileStamp{}, "", fmt.Errorf("admin token file %s is empty", f.path)
	}
	return stampFrom(fi), tok, nil
}

// stampOf stats path, following symlinks.
func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return stampFrom(fi), nil
}

func stampFrom(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(s.Dev), s.Ino
	}
	return st
}

// tokenOf returns ts's token, or an error that names no token.
func tokenOf(ts TokenSource) (string, error) {
	if ts == nil {
		return "", ErrNoToken
	}
	tok, err := ts.Token()
	if err == nil && tok == "" {
		err = ErrNoToken
	}
	if err != nil && !errors.Is(err, ErrNoToken) {
		err = fmt.Errorf("%w: %w", ErrNoToken, err)
	}
	return tok, err
}

// tokenEqual compares two tokens in constant time (of their SHA-256
// digests, so that their lengths do not show either).
func tokenEqual(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// checkToken tells whether got is accepted by ts: its token, or for a
// TokenFile also the previous one within RotationGrace.
func checkToken(ts TokenSource, got string) bool {
	if f, ok := ts.(*TokenFile); ok {
		return f.accepts(got)
	}
	want, err := tokenOf(ts)
	return err == nil && tokenEqual(got, want)
}
