package nlm

import (
	"strconv"
	"syscall"
)

// Stat is nlm4_stats (X/Open XNFS section 14.1), a 4-byte enum. It
// implements error; use Err to turn Granted into nil.
type Stat uint32

// nlm4_stats values.
const (
	Granted           Stat = 0 // NLM4_GRANTED: the call succeeded
	Denied            Stat = 1 // NLM4_DENIED: a conflicting lock is held
	DeniedNoLocks     Stat = 2 // NLM4_DENIED_NOLOCKS: the server is out of resources
	Blocked           Stat = 3 // NLM4_BLOCKED: queued; GRANTED follows when free
	DeniedGracePeriod Stat = 4 // NLM4_DENIED_GRACE_PERIOD: only reclaims during the grace period
	Deadlck           Stat = 5 // NLM4_DEADLCK: granting would deadlock
	ROFS              Stat = 6 // NLM4_ROFS: read-only file system
	StaleFH           Stat = 7 // NLM4_STALE_FH: unknown file handle
	FBig              Stat = 8 // NLM4_FBIG: offset or length too big
	Failed            Stat = 9 // NLM4_FAILED: any other failure
)

var statNames = [...]string{
	"NLM4_GRANTED", "NLM4_DENIED", "NLM4_DENIED_NOLOCKS", "NLM4_BLOCKED",
	"NLM4_DENIED_GRACE_PERIOD", "NLM4_DEADLCK", "NLM4_ROFS", "NLM4_STALE_FH",
	"NLM4_FBIG", "NLM4_FAILED",
}

var statErrnos = [...]syscall.Errno{
	0, syscall.EAGAIN, syscall.ENOLCK, syscall.ENOLCK, syscall.ENOLCK,
	syscall.EDEADLK, syscall.EROFS, syscall.ESTALE, syscall.EOVERFLOW, syscall.ENOLCK,
}

// String returns the X/Open name ("NLM4_DENIED"), or "NLM4_STAT(n)".
func (s Stat) String() string {
	if int(s) < len(statNames) {
		return statNames[s]
	}
	return "NLM4_STAT(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Error returns the status name and the text of its errno.
func (s Stat) Error() string {
	if s == Granted {
		return "NLM4_GRANTED"
	}
	return s.String() + ": " + s.Errno().Error()
}

// Err returns nil for Granted and s otherwise.
func (s Stat) Err() error {
	if s == Granted {
		return nil
	}
	return s
}

// Errno returns the errno Linux's NLM client gives a caller for s
// (nlm_stat_to_errno): EAGAIN for Denied; ENOLCK for DeniedNoLocks,
// Blocked, DeniedGracePeriod, Failed and unknown values; EDEADLK, EROFS,
// ESTALE, EOVERFLOW for Deadlck, ROFS, StaleFH, FBig; 0 for Granted.
func (s Stat) Errno() syscall.Errno {
	if int(s) < len(statErrnos) {
		return statErrnos[s]
	}
	return syscall.ENOLCK
}

// Is reports whether s matches target: a syscall.Errno equal to s.Errno(),
// or an io/fs error that s.Errno() matches.
func (s Stat) Is(target error) bool {
	if s == Granted {
		return false
	}
	e := s.Errno()
	if t, ok := target.(syscall.Errno); ok {
		return t == e
	}
	return e.Is(target)
}
