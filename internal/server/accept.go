package server

import (
	"context"
	"errors"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// acceptLoop hands each sender that connects to l to accepted, and each
// accept failure to errs, until ctx ends. After a failure of the listener
// itself (such as too many open files) it pauses briefly, so that it does
// not spin; after a refused peer (conn.ErrRefused) it goes on at once, so
// that refused peers cannot hold up real ones.
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
			if errors.Is(err, conn.ErrRefused) {
				continue
			}
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
