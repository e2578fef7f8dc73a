package pipe

import (
	"context"
	"time"
)

// AcceptLoop hands each sender that connects to l to accepted, and each
// accept failure to errs, until ctx ends; after a failure it pauses
// briefly, so that a listener failing again at once does not spin.
func AcceptLoop(ctx context.Context, l Listener, accepted chan<- Conn, errs chan<- error) {
	for {
		conn, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case errs <- err:
			case <-ctx.Done():
				return
			}
			// A listener that fails at once again (a local resource
			// problem) must not spin.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case accepted <- conn:
		case <-ctx.Done():
			conn.Close()
			return
		}
	}
}
