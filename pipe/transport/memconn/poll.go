package memconn

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
		return 0, fmt.Errorf("poll %s: no room for completions", c.peer.name)
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, conn.ErrClosed
		}
		if n := copy(cs, c.comps); n > 0 {
			c.comps = c.comps[:copy(c.comps, c.comps[n:])]
			for _, x := range cs[:n] {
				switch x.Op {
				case conn.OpSend:
					c.sendBusy[x.Buf] = false
				case conn.OpRecv:
					c.recvBusy[x.Buf] = false
				case conn.OpForward:
					if c.lender != nil {
						c.lender.lent[x.Buf].Store(false)
					}
				}
			}
			c.mu.Unlock()
			return n, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// usable returns nil while work may be posted, else why not.
func (c *Conn) usable() error {
	if c.closed {
		return conn.ErrClosed
	}
	return c.err
}

// fail records err as the reason the end failed, unless one was recorded
// before, and wakes its Poll and deliverLoop.
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	signal(c.wake)
	signal(c.kick)
}
