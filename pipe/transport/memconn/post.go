package memconn

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// PostSend queues the first n bytes of send buffer i as one message; they
// are copied when the message arrives. The buffer must not be posted again
// until Poll has reported it.
func (c *Conn) PostSend(i, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if i < 0 || i >= len(c.sendBufs) || n < 0 || n > len(c.sendBufs[i]) {
		return fmt.Errorf("post send to %s: no room for %d bytes in send buffer %d of %d", c.peer.name, n, i, len(c.sendBufs))
	}
	if c.sendBusy[i] {
		return fmt.Errorf("post send to %s: send buffer %d is already posted", c.peer.name, i)
	}
	c.sendBusy[i] = true
	c.dataInFlight++
	c.stats.MaxDataInFlight = max(c.stats.MaxDataInFlight, c.dataInFlight)
	c.queue(message{buf: i, n: n})
	return nil
}

// Adopt makes up's receive buffers sendable with PostForward.
func (c *Conn) Adopt(up conn.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adopted = up
	c.lender, _ = up.(*Conn)
	return nil
}

// PostForward queues the first n bytes of the adopted connection's receive
// buffer i as one message; they are read when the message arrives.
func (c *Conn) PostForward(i, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if c.adopted == nil || i < 0 || i >= c.adopted.RecvBufs() || n < 0 || n > len(c.adopted.RecvBuf(i)) {
		return fmt.Errorf("post forward to %s: no room for %d bytes in adopted receive buffer %d", c.peer.name, n, i)
	}
	c.dataInFlight++
	c.stats.MaxDataInFlight = max(c.stats.MaxDataInFlight, c.dataInFlight)
	if c.lender != nil {
		c.lender.lent[i].Store(true)
	}
	c.queue(message{buf: i, n: n, from: c.adopted.RecvBuf(i)[:n]})
	return nil
}

// SendControl copies p (at most conn.MaxControl bytes) and queues it as
// one message.
func (c *Conn) SendControl(ctx context.Context, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if len(p) > conn.MaxControl {
		return fmt.Errorf("send control to %s: %d bytes is more than the limit of %d", c.peer.name, len(p), conn.MaxControl)
	}
	c.queue(message{buf: -1, n: len(p), ctrl: append([]byte{}, p...)})
	return nil
}

// queue numbers m and hands it to deliverLoop.
func (c *Conn) queue(m message) {
	c.stats.Sent++
	m.seq = c.stats.Sent
	m.due = time.Now().Add(c.faults.Delay)
	c.inFlight++
	c.stats.MaxInFlight = max(c.stats.MaxInFlight, c.inFlight)
	c.out = append(c.out, m)
	signal(c.kick)
}

// PostRecv makes receive buffer i available for the next message. The
// buffer must not be posted again until Poll has reported it, and buffers
// holding PostSend messages must be re-posted in the order those arrived
// (see conn.Conn): an out-of-order one fails and counts as a violation.
func (c *Conn) PostRecv(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if i < 0 || i >= len(c.recvBufs) {
		return fmt.Errorf("post receive from %s: no receive buffer %d of %d", c.peer.name, i, len(c.recvBufs))
	}
	if c.recvBufs[i] == nil {
		return fmt.Errorf("post receive from %s: receive buffer %d is in the window, which is not open", c.peer.name, i)
	}
	if c.recvBusy[i] {
		return fmt.Errorf("post receive from %s: receive buffer %d is already posted", c.peer.name, i)
	}
	if c.lent[i].Load() {
		c.stats.Violations++
		return fmt.Errorf("post receive from %s: receive buffer %d re-posted while a forwarded send from it is in flight", c.peer.name, i)
	}
	if c.holds[i] == holdsData {
		if c.dataOrder[0] != i {
			c.stats.Violations++
			return fmt.Errorf("post receive from %s: receive buffer %d re-posted before buffer %d, whose data arrived first", c.peer.name, i, c.dataOrder[0])
		}
		c.dataOrder = c.dataOrder[1:]
	}
	c.recvBusy[i] = true
	c.peer.landed(c.holds[i], -1)
	c.holds[i] = holdsNothing
	c.posted = append(c.posted, i)
	return nil
}

// landed adds d to this end's in-flight counts for a message that the peer
// holds as h.
func (c *Conn) landed(h holding, d int) {
	if h != holdsNothing {
		c.inFlight += d
	}
	if h == holdsData {
		c.dataInFlight += d
	}
}
