package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// ctrlWaitMax is the longest pause between two looks for a free control
// buffer.
const ctrlWaitMax = 10 * time.Millisecond

// posts are the books of what is posted and not yet completed.
type posts struct {
	sendLen  []atomic.Int32 // bytes posted per send buffer, for OpSend
	sendsOut atomic.Int32   // data sends posted and not completed
	send     []atomic.Bool  // per send buffer: posted, not yet completed
	recv     []atomic.Bool  // per receive buffer: posted, not yet completed (SEND data path)
	writes   atomic.Uint64  // a sender's data messages posted

	ctrlMu   sync.Mutex
	ctrlFree []int // control buffers not in flight
}

// init sizes the books for sends send buffers, none posted, and makes
// every control buffer free.
func (p *posts) init(sends int) {
	p.sendLen = make([]atomic.Int32, sends)
	p.send = make([]atomic.Bool, sends)
	p.ctrlFree = make([]int, ctrlSlots)
	for i := range p.ctrlFree {
		p.ctrlFree[i] = i
	}
}

// PostSend posts the first n bytes of send buffer i as one signaled SEND,
// or, when the receiver offered a ring, as one RDMA WRITE with immediate
// into its next slot (see ring.go). The buffer must not be posted again
// until its completion is taken from the completion queue. Data messages
// are posted from one goroutine at a time.
func (c *Conn) PostSend(i, n int) error {
	if i < 0 || i >= len(c.bufs.send) || n < 0 || n > len(c.bufs.send[i]) {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "buffer %d, %d bytes: out of range", i, n)
	}
	if err := c.fits(n); err != nil {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "%v", err)
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	if !c.posts.send[i].CompareAndSwap(false, true) {
		return conn.Errorf(conn.KindInternal, "post send to "+c.peer, "send buffer %d is already posted", i)
	}
	c.posts.sendLen[i].Store(int32(n))
	c.posts.sendsOut.Add(1)
	if rc := c.postData(wrData|uint64(i), unsafe.Pointer(&c.bufs.send[i][0]), n, c.devs.lkeys); rc != 0 {
		c.posts.sendsOut.Add(-1)
		c.posts.send[i].Store(false)
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
// device lkeys holds, indexed like c.devs.lkeys) as the next data message, with
// work request id wr: an RDMA WRITE with immediate into the receiver's
// next ring slot, over the next lane, or a SEND. A write counts in
// c.posts.writes only once it is posted: a control message says how many went
// before it (lanes.go), and the receiver waits for that many. Data
// messages are posted from one goroutine at a time.
func (c *Conn) postData(wr uint64, addr unsafe.Pointer, n int, lkeys []C.uint32_t) C.int {
	r := c.ring
	if r == nil {
		return C.rp_post_send(c.qp, C.uint64_t(wr), addr, C.uint32_t(n), lkeys[0], 0, 0, 0)
	}
	k := c.posts.writes.Load()
	slot := k % uint64(r.slots)
	lane := k % uint64(len(c.lanes.qps))
	var rc C.int
	if c.split.size > 0 && n > c.split.size {
		rc = C.rp_post_write_split(c.lanes.qps[lane], C.uint64_t(wr), C.uint64_t(wrPiece), addr, C.uint32_t(n), lkeys[c.devs.laneNIC[lane]],
			C.uint64_t(r.addr+slot*uint64(r.stride)), C.uint32_t(r.rkeys[lane]), C.uint32_t(splitImm(uint32(slot), n, c.split.size)), C.uint32_t(c.split.size))
	} else {
		rc = C.rp_post_write_imm(c.lanes.qps[lane], C.uint64_t(wr), addr, C.uint32_t(n), lkeys[c.devs.laneNIC[lane]],
			C.uint64_t(r.addr+slot*uint64(r.stride)), C.uint32_t(r.rkeys[lane]), C.uint32_t(slot))
	}
	if rc == 0 {
		c.posts.writes.Add(1)
	}
	return rc
}

// PostRecv makes receive buffer i available for the next message. The
// buffer must not be posted again until its completion is taken from the
// completion queue.
func (c *Conn) PostRecv(i int) error {
	if i < 0 || i >= len(c.bufs.recv) {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "buffer %d out of range", i)
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	if i < c.win.count && !c.win.open.Load() {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "receive buffer %d is in the window, which is not open", i)
	}
	if c.recvRing.slots > 0 {
		return c.repostRing(i)
	}
	if !c.posts.recv[i].CompareAndSwap(false, true) {
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "receive buffer %d is already posted", i)
	}
	if rc := c.postRecv(i); rc != 0 {
		c.posts.recv[i].Store(false)
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
	if err := c.recvRing.repost(i); err != nil {
		c.fail("re-post refused: " + err.Error())
		return conn.Errorf(conn.KindInternal, "post receive from "+c.peer, "%v", err)
	}
	return nil
}

// postNote posts the receive work request of note buffer k on its lane.
func (c *Conn) postNote(k int) C.int {
	b, lane := c.recvRing.notes[k], k/c.recvRing.notesPerLane
	return C.rp_post_recv(c.lanes.qps[lane], C.uint64_t(wrNote|uint64(k)), unsafe.Pointer(&b[0]), C.uint32_t(len(b)), c.devs.lkeys[c.devs.laneNIC[lane]])
}

// postRecv posts receive buffer i, which is in the window's region if
// i < c.win.count.
func (c *Conn) postRecv(i int) C.int {
	b, lkey := c.bufs.recv[i], c.bufs.lkey
	if i < c.win.count {
		lkey = c.win.lkey
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
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	slot, err := c.takeSlot(ctx)
	if err != nil {
		return err
	}
	b := c.bufs.ctrl[slot]
	copy(b, p)
	inl := C.int(0)
	if len(p) <= c.inline {
		inl = 1
	}
	// On a striped connection a control message says how many data
	// messages went before it, so that it cannot overtake them (lanes.go).
	striped := C.int(0)
	if len(c.lanes.qps) > 1 {
		striped = 1
	}
	if rc := C.rp_post_send(c.qp, C.uint64_t(wrCtrl|uint64(slot)), unsafe.Pointer(&b[0]), C.uint32_t(len(p)), c.bufs.lkey, inl,
		striped, C.uint32_t(c.posts.writes.Load())); rc != 0 {
		c.posts.freeSlot(slot)
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
		if slot, ok := c.posts.popSlot(); ok {
			return slot, nil
		}
		if err := c.life.stopped(); err != nil {
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

// popSlot takes a free control buffer, if there is one.
func (p *posts) popSlot() (int, bool) {
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	n := len(p.ctrlFree)
	if n == 0 {
		return 0, false
	}
	slot := p.ctrlFree[n-1]
	p.ctrlFree = p.ctrlFree[:n-1]
	return slot, true
}

// freeSlot gives control buffer slot back.
func (p *posts) freeSlot(slot int) {
	p.ctrlMu.Lock()
	p.ctrlFree = append(p.ctrlFree, slot)
	p.ctrlMu.Unlock()
}

// ctrlBusy reports whether a control message is in flight.
func (p *posts) ctrlBusy() bool {
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	return len(p.ctrlFree) < ctrlSlots
}
