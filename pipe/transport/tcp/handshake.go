package tcp

import (
	"context"
	"net"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// guard bounds the I/O on nc by timeout and interrupts it when ctx ends,
// until the returned function is called. That function clears the deadline
// and returns the end of ctx as an error if ctx ended meanwhile.
func guard(ctx context.Context, nc net.Conn, timeout time.Duration) func() error {
	_ = nc.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	return func() error {
		if !stop() {
			return ctx.Err()
		}
		return nc.SetDeadline(time.Time{})
	}
}

// interrupted is the error for an operation cut short by the end of ctx.
func interrupted(op string, err error) error {
	return &conn.Error{Kind: conn.KindAborted, Op: op, Err: err}
}
