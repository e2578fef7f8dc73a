package tcp

import (
	"context"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Poll waits until at least one work request has finished and stores up to
// len(cs) completions in cs. Completions that finished before the
// connection failed are returned before the failure is. After Close it
// returns conn.ErrClosed.
func (c *Conn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	if len(cs) == 0 {
		return 0, fmt.Errorf("poll %s: no room for completions", c.remote)
	}
	if c.life.closed.Load() {
		return 0, conn.ErrClosed
	}
	select {
	case cs[0] = <-c.comps:
	default:
		select {
		case cs[0] = <-c.comps:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.life.done:
			select {
			case cs[0] = <-c.comps:
			default:
				if c.life.closed.Load() {
					return 0, conn.ErrClosed
				}
				return 0, c.life.err
			}
		}
	}
	n := 1
	for n < len(cs) {
		select {
		case cs[n] = <-c.comps:
			n++
		default:
			return c.release(cs[:n]), nil
		}
	}
	return c.release(cs), nil
}

// release marks the buffers of cs as free to be posted again and returns
// len(cs).
func (c *Conn) release(cs []conn.Completion) int {
	for _, x := range cs {
		switch x.Op {
		case conn.OpSend:
			c.bufs.sendBusy[x.Buf].Store(false)
		case conn.OpRecv:
			c.bufs.recvBusy[x.Buf].Store(false)
		}
	}
	return len(cs)
}
