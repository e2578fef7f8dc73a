package conn

import (
	"errors"
	"fmt"
)

// Kind classifies an Error; the commands map each kind to an exit code.
type Kind uint8

// The kinds of failure. Their order is part of the wire protocol: an abort
// message carries its Kind so that both peers report the same class.
const (
	KindInternal  Kind = iota // a bug or an unexpected local failure
	KindUsage                 // bad flags or arguments
	KindSetup                 // cannot connect, listen, allocate or register
	KindAborted               // the stream ended early: peer abort, peer lost, interrupted, I/O failure
	KindIntegrity             // the stream arrived damaged: checksum, length or sequence mismatch
	KindAuth                  // wrong or missing shared key
	KindNoRDMA                // RDMA was requested but is not available here
	KindBusy                  // the receiver is serving another stream
)

var kindNames = [...]string{"internal error", "usage error", "setup failure", "stream aborted",
	"integrity failure", "authentication failure", "RDMA not available", "receiver busy"}

// String returns a short description of the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", k)
}

// Error is a failure with its kind, the operation that failed and the cause.
type Error struct {
	Kind Kind
	Op   string // what was being done, e.g. "connect 10.0.0.2:18800"
	Err  error
}

// Error returns the operation and the cause.
func (e *Error) Error() string {
	if e.Op == "" {
		return e.Err.Error()
	}
	return e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the first *Error in err's chain, or
// KindInternal if there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// Errorf returns an *Error of kind k for operation op.
func Errorf(k Kind, op, format string, args ...any) error {
	return &Error{Kind: k, Op: op, Err: fmt.Errorf(format, args...)}
}

// ErrBusy is the cause of a busy receiver's refusal (Params.Busy in its
// answer), as a Dialer reports it.
var ErrBusy = errors.New("receiver busy with another stream: retry later")

// ErrLocal is joined to setup errors caused by this host rather than by the
// peer (too little locked memory, no memory, no device resources): a
// receiver that meets one cannot serve any sender until it is fixed.
var ErrLocal = errors.New("local resources")

// ErrRefused is matched (errors.Is) by the Accept errors that report a
// peer the listener refused: the refusal cost nothing that outlives it, so
// Accept may be called again at once.
var ErrRefused = errors.New("peer refused")

// Refused marks err, keeping its message, as a listener's refusal of a peer
// (see ErrRefused).
func Refused(err error) error { return refusal{err} }

type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

func (refusal) Is(target error) bool { return target == ErrRefused }
