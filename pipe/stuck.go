package pipe

import (
	"errors"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// ErrStuck is joined to a stream's error when its input reader or output
// writer is still blocked in a system call on the connection's buffers
// after the stream failed. The caller must then not Close the connection
// (that would unmap memory the kernel may still read or write) and should
// exit the process instead.
var ErrStuck = errors.New("input or output still blocked")

// Release closes c after Send or Receive returned err, unless err says
// that the stream's reader or writer may still be using c's buffers
// (ErrStuck): c must then stay open, since closing it would unmap memory
// the kernel may still read or write, and the process should exit soon.
// It reports whether it left c open.
func Release(c conn.Conn, err error) (stuck bool) {
	if errors.Is(err, ErrStuck) {
		return true
	}
	c.Close()
	return false
}

// workerGrace is how long a failed stream waits for its reader or writer:
// short, since a failure is reported only after it (a peer's silence is to
// be reported within a second of the timeout), and a reader blocked on an
// idle input never returns by itself.
const workerGrace = 500 * time.Millisecond

// settle waits (up to workerGrace) for a failed stream's reader to
// finish with the connection's buffers, and returns err, marked with
// ErrStuck if it did not. A receiver's writer is waited for the same way
// (receiver.await).
func settle(err error, done <-chan struct{}) error {
	select {
	case <-done:
		return err
	case <-time.After(workerGrace):
		return stuckError{err}
	}
}

// stuckError is a stream error marked with ErrStuck; its text is err's.
type stuckError struct{ error }

func (e stuckError) Unwrap() []error { return []error{e.error, ErrStuck} }
