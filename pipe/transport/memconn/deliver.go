package memconn

import (
	"fmt"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// deliverLoop delivers this end's messages to the peer in order, each when
// it is due, until the end fails, or until it is closed and has delivered
// everything queued.
func (c *Conn) deliverLoop() {
	defer close(c.delivered)
	for {
		m, ok := c.next()
		if !ok {
			return
		}
		time.Sleep(time.Until(m.due))
		c.mu.Lock()
		c.deliver(m)
		if len(c.out) == 0 && len(c.heldFwd) > 0 {
			c.flushForwards() // no later one to report it after
			signal(c.wake)
		}
		c.mu.Unlock()
	}
}

// next waits for the next message to deliver. It returns false when there
// is none and there will be none.
func (c *Conn) next() (message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.err != nil:
			return message{}, false
		case len(c.out) > 0:
			m := c.out[0]
			c.out = c.out[1:]
			return m, true
		case c.closed:
			return message{}, false
		}
		c.mu.Unlock()
		<-c.kick
		c.mu.Lock()
	}
}

// deliver copies m into the peer's oldest posted receive buffer, applying
// the faults, and reports it to both ends. The caller holds c.mu.
func (c *Conn) deliver(m message) {
	r := c.peer
	if c.err != nil || r.err != nil || r.closed {
		return
	}
	h := holdsData
	if m.buf < 0 {
		h = holdsControl
	}
	switch {
	case c.faults.CutAt > 0 && m.seq >= c.faults.CutAt:
		c.breakLink(conn.KindAborted, fmt.Errorf("connection lost: the peer vanished (fault injected at message %d)", m.seq))
		return
	case m.seq == c.faults.DropAt:
		c.landed(h, -1)
		c.sent(m)
		return
	}
	i, ok := r.takePosted(h == holdsControl)
	if !ok {
		r.stats.Violations++
		what := "data message %d arrived with no posted data receive buffer: the engine sent without a credit"
		if h == holdsControl {
			what = "control message %d arrived with no posted spare receive buffer: the engine sent without a control credit"
		}
		c.breakLink(conn.KindInternal, fmt.Errorf(what, m.seq))
		return
	}
	if m.n > len(r.recvBufs[i]) {
		r.stats.Violations++
		c.breakLink(conn.KindInternal, fmt.Errorf("message %d of %d bytes does not fit a %d-byte receive buffer", m.seq, m.n, len(r.recvBufs[i])))
		return
	}
	if h == holdsData {
		r.dataOrder = append(r.dataOrder, i)
	}
	dst := r.recvBufs[i][:m.n]
	switch {
	case m.from != nil:
		copy(dst, m.from)
	case m.buf < 0:
		copy(dst, m.ctrl)
	default:
		copy(dst, c.sendBufs[m.buf])
	}
	if m.seq == c.faults.CorruptAt && m.n > 0 {
		dst[0] ^= 1
	}
	r.holds[i] = h
	r.stats.Received++
	r.comps = append(r.comps, conn.Completion{Op: conn.OpRecv, Buf: i, Len: m.n})
	signal(r.wake)
	c.sent(m)
}

// takePosted takes the oldest posted receive buffer for a control message
// (a spare) or a data message (one of the others), as an RDMA receiver
// with a ring does: its data lands in the ring, its control messages in
// the spares, and neither may borrow from the other.
func (c *Conn) takePosted(control bool) (int, bool) {
	for k, i := range c.posted {
		if (i >= c.spareFrom) == control {
			c.posted = append(c.posted[:k], c.posted[k+1:]...)
			return i, true
		}
	}
	return 0, false
}

// sent reports m's send completion, if it was a PostSend or PostForward.
func (c *Conn) sent(m message) {
	switch {
	case m.from != nil:
		comp := conn.Completion{Op: conn.OpForward, Buf: m.buf, Len: m.n}
		if c.faults.ReorderForwards && len(c.heldFwd) == 0 {
			c.heldFwd = append(c.heldFwd, comp)
			return
		}
		c.comps = append(c.comps, comp)
		c.flushForwards()
	case m.buf >= 0:
		c.flushForwards()
		c.comps = append(c.comps, conn.Completion{Op: conn.OpSend, Buf: m.buf, Len: m.n})
	default:
		return
	}
	signal(c.wake)
}

// flushForwards reports the PostForward completion held back, if any.
func (c *Conn) flushForwards() {
	c.comps, c.heldFwd = append(c.comps, c.heldFwd...), c.heldFwd[:0]
}

// breakLink fails both ends with err, of kind k.
func (c *Conn) breakLink(k conn.Kind, err error) {
	c.fail(&conn.Error{Kind: k, Op: "send to " + c.peer.name, Err: err})
	c.peer.fail(&conn.Error{Kind: k, Op: "receive from " + c.name, Err: err})
}
