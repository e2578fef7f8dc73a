package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// ctrlWaitMax is the longest pause between two looks for a free control
// buffer.
const ctrlWaitMax = 10 * time.Millisecond

// PostSend posts the first n bytes of send buffer i as one signaled SEND,
// or, when the receiver offered a ring, as one RDMA WRITE with immediate
// into its next slot (see ring.go). The buffer must not be posted again
// until its completion is taken from the completion queue. Data messages
// are posted from one goroutine at a time.
func (c *Conn) PostSend(i, n int) error {
	if i < 0 || i >= len(c.send) || n < 0 || n > len(c.send[i]) {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "buffer %d, %d bytes: out of range", i, n)
	}
	if err := c.fits(n); err != nil {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "%v", err)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	if !c.sendPosted[i].CompareAndSwap(false, true) {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "send buffer %d is already posted", i)
	}
	c.sendLen[i].Store(int32(n))
	c.sendsOut.Add(1)
	if rc := c.postData(wrData|uint64(i), unsafe.Pointer(&c.send[i][0]), n, c.lkeys); rc != 0 {
		c.sendsOut.Add(-1)
		c.sendPosted[i].Store(false)
		return &conn.Error{Kind: conn.KindAborted, Op: "post send to " + c.peer, Err: fmt.Errorf("ibv_post_send: %w", errno(rc))}
	}
	return nil
}

// fits says why an n-byte data message cannot be sent, if it cannot: the
// receiver's window is not known yet (see SetWindow), or the message is
// larger than a slot of its ring.
func (c *Conn) fits(n int) error {
	switch r := c.ring; {
	case !c.placed:
		return fmt.Errorf("the receiver's window is not known yet (SetWindow)")
	case r == nil:
		return nil
	case n > int(r.stride):
		return fmt.Errorf("%d bytes do not fit a %d-byte ring slot", n, r.stride)
	}
	return nil
}

// postData posts n bytes at addr (in the memory region whose key on each
// device lkeys holds, indexed like c.lkeys) as the next data message, with
// work request id wr: an RDMA WRITE with immediate into the receiver's
// next ring slot, over the next lane, or a SEND. A write counts in
// c.writes only once it is posted: a control message says how many went
// before it (lanes.go), and the receiver waits for that many. Data
// messages are posted from one goroutine at a time.
func (c *Conn) postData(wr uint64, addr unsafe.Pointer, n int, lkeys []C.uint32_t) C.int {
	r := c.ring
	if r == nil {
		return C.rp_post_send(c.qp, C.uint64_t(wr), addr, C.uint32_t(n), lkeys[0], 0, 0, 0)
	}
	k := c.writes.Load()
	slot := k % uint64(r.slots)
	lane := k % uint64(len(c.qps))
	var rc C.int
	if c.split > 0 && n > c.split {
		rc = C.rp_post_write_split(c.qps[lane], C.uint64_t(wr), C.uint64_t(wrPiece), addr, C.uint32_t(n), lkeys[c.laneNIC[lane]],
			C.uint64_t(r.addr+slot*uint64(r.stride)), C.uint32_t(r.rkeys[lane]), C.uint32_t(splitImm(uint32(slot), n, c.split)), C.uint32_t(c.split))
	} else {
		rc = C.rp_post_write_imm(c.qps[lane], C.uint64_t(wr), addr, C.uint32_t(n), lkeys[c.laneNIC[lane]],
			C.uint64_t(r.addr+slot*uint64(r.stride)), C.uint32_t(r.rkeys[lane]), C.uint32_t(slot))
	}
	if rc == 0 {
		c.writes.Add(1)
	}
	return rc
}

// PostRecv makes receive buffer i available for the next message. The
// buffer must not be posted again until its completion is taken from the
// completion queue.
func (c *Conn) PostRecv(i int) error {
	if i < 0 || i >= len(c.recv) {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "buffer %d out of range", i)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	if i < c.window && !c.winOpen.Load() {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "receive buffer %d is in the window, which is not open", i)
	}
	if c.slots > 0 {
		return c.repostRing(i)
	}
	if !c.recvPosted[i].CompareAndSwap(false, true) {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "receive buffer %d is already posted", i)
	}
	if rc := c.postRecv(i); rc != 0 {
		c.recvPosted[i].Store(false)
		err := fmt.Errorf("ibv_post_recv: %w", errno(rc))
		c.fail(err.Error())
		return &conn.Error{Kind: conn.KindAborted, Op: "post receive from " + c.peer, Err: err}
	}
	return nil
}

// repostRing gives buffer i back to a receiver's ring: a ring slot, which
// must be the oldest one the engine holds, or a spare, which takes a later
// control message. A re-post the ring refuses fails the connection: the
// slot would stay unposted, and the sender's next write into it would be
// blamed on the sender.
func (c *Conn) repostRing(i int) error {
	c.ringMu.Lock()
	err := c.rs.Repost(i)
	c.ringMu.Unlock()
	if err != nil {
		c.fail("re-post refused: " + err.Error())
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "%v", err)
	}
	return nil
}

// postNote posts the receive work request of note buffer k on its lane.
func (c *Conn) postNote(k int) C.int {
	b, lane := c.notes[k], k/c.notesPerLane
	return C.rp_post_recv(c.qps[lane], C.uint64_t(wrNote|uint64(k)), unsafe.Pointer(&b[0]), C.uint32_t(len(b)), c.lkeys[c.laneNIC[lane]])
}

// postRecv posts receive buffer i, which is in the window's region if
// i < c.window.
func (c *Conn) postRecv(i int) C.int {
	b, lkey := c.recv[i], c.lkey
	if i < c.window {
		lkey = c.winLkey
	}
	return C.rp_post_recv(c.qp, C.uint64_t(wrRecv|uint64(i)), unsafe.Pointer(&b[0]), C.uint32_t(len(b)), lkey)
}

// SendControl sends p from one of a ring of registered buffers (inline
// when it fits). If every control buffer is in flight (the peer is not
// taking messages: paused, or its receives are all in use) it reaps
// completions itself until one is free, keeping other completions for
// Poll. It waits as long as ctx lives and the connection stands: a message
// is either queued or SendControl returns an error, never dropped.
func (c *Conn) SendControl(ctx context.Context, p []byte) error {
	if len(p) > conn.MaxControl {
		return conn.Errorf(conn.KindInternal, "send control message to "+c.peer, "%d bytes exceed the limit of %d", len(p), conn.MaxControl)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	slot, err := c.takeSlot(ctx)
	if err != nil {
		return err
	}
	b := c.ctrl[slot]
	copy(b, p)
	inl := C.int(0)
	if len(p) <= c.inline {
		inl = 1
	}
	// On a striped connection a control message says how many data
	// messages went before it, so that it cannot overtake them (lanes.go).
	striped := C.int(0)
	if len(c.qps) > 1 {
		striped = 1
	}
	if rc := C.rp_post_send(c.qp, C.uint64_t(wrCtrl|uint64(slot)), unsafe.Pointer(&b[0]), C.uint32_t(len(p)), c.lkey, inl,
		striped, C.uint32_t(c.writes.Load())); rc != 0 {
		c.freeSlot(slot)
		err := fmt.Errorf("ibv_post_send: %w", errno(rc))
		c.fail(err.Error())
		return &conn.Error{Kind: conn.KindAborted, Op: "send control message to " + c.peer, Err: err}
	}
	return nil
}

// takeSlot returns a free control buffer, reaping completions while none
// is, until ctx ends or the connection stops.
func (c *Conn) takeSlot(ctx context.Context) (int, error) {
	for wait := time.Microsecond; ; wait = min(2*wait, ctrlWaitMax) {
		c.ctrlMu.Lock()
		if n := len(c.ctrlFree); n > 0 {
			slot := c.ctrlFree[n-1]
			c.ctrlFree = c.ctrlFree[:n-1]
			c.ctrlMu.Unlock()
			return slot, nil
		}
		c.ctrlMu.Unlock()
		if err := c.stopped(); err != nil {
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			return 0, &conn.Error{Kind: conn.KindAborted, Op: "send control message to " + c.peer,
				Err: fmt.Errorf("all %d control buffers still in flight: peer not receiving (%w)", ctrlSlots, err)}
		}
		if c.drain() > 0 {
			wait = time.Microsecond
			continue
		}
		time.Sleep(wait)
	}
}

func (c *Conn) freeSlot(slot int) {
	c.ctrlMu.Lock()
	c.ctrlFree = append(c.ctrlFree, slot)
	c.ctrlMu.Unlock()
}

// ctrlBusy reports whether a control message is in flight.
func (c *Conn) ctrlBusy() bool {
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	return len(c.ctrlFree) < ctrlSlots
}
