package tcp

import (
	"context"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// PostSend sends the first n bytes of send buffer i as one message. The
// buffer must not be posted again until Poll has reported it.
func (c *Conn) PostSend(i, n int) error {
	if err := c.life.usable(); err != nil {
		return err
	}
	if i < 0 || i >= len(c.bufs.send) || n < 0 || n > len(c.bufs.send[i]) {
		return fmt.Errorf("post send to %s: no room for %d bytes in send buffer %d of %d", c.remote, n, i, len(c.bufs.send))
	}
	if !c.bufs.sendBusy[i].CompareAndSwap(false, true) {
		return fmt.Errorf("post send to %s: send buffer %d is already posted", c.remote, i)
	}
	c.post(work{buf: i, n: n})
	return nil
}

// Adopt makes up's receive buffers sendable with PostForward: writes to
// the socket can come from any memory.
func (c *Conn) Adopt(up conn.Conn) error {
	c.adopted.Store(&up)
	return nil
}

// PostForward queues the first n bytes of the adopted connection's receive
// buffer i as one message, written from there.
func (c *Conn) PostForward(i, n int) error {
	if err := c.life.usable(); err != nil {
		return err
	}
	up := c.adopted.Load()
	if up == nil || i < 0 || i >= (*up).RecvBufs() || n < 0 || n > len((*up).RecvBuf(i)) {
		return fmt.Errorf("post forward to %s: no room for %d bytes in adopted receive buffer %d", c.remote, n, i)
	}
	c.post(work{buf: i, n: n, fwd: true})
	return nil
}

// SendControl copies p (at most conn.MaxControl bytes) and queues it as one
// message. It waits only while as many control messages as the peer has
// receive buffers are still unwritten, that is while the peer is not reading.
func (c *Conn) SendControl(ctx context.Context, p []byte) error {
	if err := c.life.usable(); err != nil {
		return err
	}
	if len(p) > conn.MaxControl {
		return fmt.Errorf("send control to %s: %d bytes is more than the limit of %d", c.remote, len(p), conn.MaxControl)
	}
	var slot int
	select {
	case slot = <-c.ctrlFree:
	case <-c.life.done:
		return c.life.usable()
	case <-ctx.Done():
		return &conn.Error{Kind: conn.KindAborted, Op: "send control to " + c.remote, Err: ctx.Err()}
	}
	n := copy(c.bufs.ctrl[slot], p)
	c.post(work{buf: slot, n: n, ctrl: true})
	return nil
}

// PostRecv makes receive buffer i available for the next message. The
// buffer must not be posted again until Poll has reported it.
func (c *Conn) PostRecv(i int) error {
	if err := c.life.usable(); err != nil {
		return err
	}
	if i < 0 || i >= len(c.bufs.recv) {
		return fmt.Errorf("post receive from %s: no receive buffer %d of %d", c.remote, i, len(c.bufs.recv))
	}
	if c.bufs.recv[i] == nil {
		return fmt.Errorf("post receive from %s: receive buffer %d is in the window, which is not open", c.remote, i)
	}
	if !c.bufs.recvBusy[i].CompareAndSwap(false, true) {
		return fmt.Errorf("post receive from %s: receive buffer %d is already posted", c.remote, i)
	}
	if i >= c.bufs.spareFrom {
		c.postedCtrl <- i
	} else {
		c.postedData <- i
	}
	return nil
}
