package server

import (
	"context"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// acceptLoop hands each sender that connects to l to accepted, and each
// accept failure to errs, until ctx ends; after a failure it pauses
// briefly, so that a listener failing again at once does not spin.
func acceptLoop(ctx context.Context, l conn.Listener, accepted chan<- conn.Conn, errs chan<- error) {
	for {
		c, err := l.Accept(ctx)
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
		case accepted <- c:
		case <-ctx.Done():
			c.Close()
			return
		}
	}
}
