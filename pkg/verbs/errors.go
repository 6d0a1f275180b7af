package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors, for errors.Is.
var (
	ErrClosed      = errors.New("verbs: closed")
	ErrInvalidWR   = errors.New("verbs: invalid work request")
	ErrQueueFull   = errors.New("verbs: work queue full")
	ErrQPState     = errors.New("verbs: queue pair not in a state to post")
	ErrInvalidKey  = errors.New("verbs: invalid lkey/STag")
	ErrRejected    = errors.New("verbs: connection rejected by peer")
	ErrDisconnect  = errors.New("verbs: disconnected")
	ErrCQOverrun   = errors.New("verbs: completion queue overrun")
	ErrProtocol    = errors.New("verbs: protocol error")
	ErrRemoteError = errors.New("verbs: remote error (terminate)")
	ErrLocalError  = errors.New("verbs: local error (terminate sent)")
	ErrTimeout     = errors.New("verbs: timeout")
)

// MaxPrivateData is the most consumer private data a connection request,
// accept or reject may carry: MPA's 512 bytes (RFC 5044 section 7.1) less
// the 4-byte IRD/ORD block of the enhanced setup (RFC 6581 section 3).
const MaxPrivateData = 508

// RejectError is returned by Connect when the peer rejected the request.
// It matches ErrRejected.
type RejectError struct {
	PrivateData []byte
	Reason      string
}

func (e *RejectError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("verbs: connection rejected by peer: %s", e.Reason)
	}
	return "verbs: connection rejected by peer"
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }
