package rdma

/*
#include "verbs.h"
// rp_poll keeps no pointer it is given: its out-parameters may stay on
// the Go stack (no allocation per poll).
#cgo noescape rp_poll
#cgo nocallback rp_poll
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

const (
	// pollBatch is how many completions one cgo call takes at most.
	pollBatch = 32
	// ackBatch is how many completion events are acknowledged at once.
	ackBatch = 64
	// busyCheck is how many empty polls BusyPoll makes between checks of
	// the context and the connection state.
	busyCheck = 64
)

// poller holds the completions of every device's completion queue: cqs[0]
// is the connection's cq, and Poll starts at cqs[turn].
type poller struct {
	mu      sync.Mutex
	wcs     []C.struct_rp_wc
	pending []conn.Completion // taken from the CQ by SendControl or Close
	unacked int               // CQ events not yet acknowledged (Poll and Close only)
	cqs     []*C.struct_ibv_cq
	turn    int

	// waits counts the times Poll found nothing to report and began to
	// wait (BusyPoll: every busyCheck empty polls). Tests read it to know
	// that a Poll is blocked.
	waits atomic.Uint64
}

// Poll waits for completions and stores up to len(cs) of them. Control
// message completions are handled internally and never reported. A failed
// work request fails the connection: completions before it are still
// reported, then Poll returns the failure. After Close it returns
// conn.ErrClosed. An empty cs is an error.
func (c *Conn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	if len(cs) == 0 {
		return 0, conn.Errorf(conn.KindInternal, "poll connection to "+c.peer, "no room for completions")
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if c.life.closing.Load() {
		return 0, conn.ErrClosed
	}
	for spin := 0; ; spin++ {
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		if c.opt.BusyPoll {
			if spin%busyCheck == 0 {
				c.poll.waits.Add(1)
				if err := c.life.stopped(); err != nil {
					return c.last(cs, err)
				}
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				runtime.Gosched()
			}
			continue
		}
		if err := c.life.stopped(); err != nil {
			return c.last(cs, err)
		}
		// Arm the channels, then poll once more: a completion that arrived
		// before arming raises no event.
		if !c.arm() {
			continue
		}
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		c.poll.waits.Add(1)
		if err := c.cqW.wait(ctx, c.life.stopped, c.cqEvent); err != nil {
			if ctx.Err() != nil {
				return 0, err
			}
			return c.last(cs, err)
		}
	}
}

// last returns the completions that reached the CQ before the connection
// failed with err (the peer's last message, say, which can land just as its
// disconnect is noticed: the CM event and the CQ are not ordered), and err
// once there are none left.
func (c *Conn) last(cs []conn.Completion, err error) (int, error) {
	if n := c.reap(cs); n > 0 {
		return n, nil
	}
	return 0, err
}

// arm requests a completion event for the next completion on every
// completion queue; a failure fails the connection.
func (c *Conn) arm() bool {
	for _, cq := range c.poll.cqs {
		if rc := C.rp_arm(cq); rc != 0 {
			c.fail(fmt.Sprintf("ibv_req_notify_cq: %v", errno(rc)))
			return false
		}
	}
	return true
}

// cqEvent takes one event from each completion channel that has one, and
// reports whether there was any.
func (c *Conn) cqEvent() bool {
	got := c.cqEventOf(c.cc, c.cq, &c.poll.unacked)
	for _, n := range c.devs.nics {
		got = c.cqEventOf(n.cc, n.cq, &n.unacked) || got
	}
	return got
}

// cqEventOf takes one event from the completion channel cc of cq, if there
// is one. Events are acknowledged in batches, counted in unacked; one
// event may stand for many completions.
func (c *Conn) cqEventOf(cc *C.struct_ibv_comp_channel, cq *C.struct_ibv_cq, unacked *int) bool {
	rc := C.rp_get_cq_event(cc)
	switch {
	case rc == 0:
		return false
	case rc < 0:
		c.fail(fmt.Sprintf("ibv_get_cq_event: %v", errno(rc)))
		return true
	}
	if *unacked++; *unacked >= ackBatch {
		C.ibv_ack_cq_events(cq, C.uint(*unacked))
		*unacked = 0
	}
	return true
}

// reap fills cs with kept and new completions.
func (c *Conn) reap(cs []conn.Completion) int {
	c.poll.mu.Lock()
	defer c.poll.mu.Unlock()
	n := c.poll.take(cs)
	for n < len(cs) {
		want := min(len(c.poll.wcs), len(cs)-n)
		k, ok := c.pollCQ(want)
		n += c.poll.take(cs[n:])
		if !ok || k < want {
			break
		}
	}
	return n
}

// pollCQ takes up to want completions from the CQs and accounts for them
// (poll.mu held), starting with a different CQ each time when there are
// several (see nics.go), so that none waits behind a busy one. It returns
// how many it took, and false if ibv_poll_cq failed, which fails the
// connection: the completions taken before the failure are still
// accounted for.
func (c *Conn) pollCQ(want int) (int, bool) {
	got := 0
	for j := range c.poll.cqs {
		var rc, eno C.int
		k := int(C.rp_poll(c.poll.cqs[(c.poll.turn+j)%len(c.poll.cqs)], &c.poll.wcs[0], C.int(want-got), &rc, &eno))
		for i := range k {
			c.complete(&c.poll.wcs[i])
		}
		got += k
		if rc < 0 {
			c.fail(pollError(int(rc), syscall.Errno(eno)))
			return got, false
		}
		if got == want {
			break
		}
	}
	if len(c.poll.cqs) > 1 {
		c.poll.turn = (c.poll.turn + 1) % len(c.poll.cqs)
	}
	return got, true
}

// pollError describes a failed ibv_poll_cq by its return value rc and the
// errno it left (0 if none: providers need not set it).
func pollError(rc int, eno syscall.Errno) string {
	if eno == 0 {
		return fmt.Sprintf("ibv_poll_cq failed (returned %d)", rc)
	}
	return fmt.Sprintf("ibv_poll_cq failed (returned %d): %v", rc, eno)
}

// take moves kept completions into cs and returns how many.
func (p *poller) take(cs []conn.Completion) int {
	n := copy(cs, p.pending)
	p.pending = p.pending[n:]
	return n
}

// drain takes completions from the CQ for SendControl and Close, keeping
// those Poll must report. It returns how many it took.
func (c *Conn) drain() int {
	c.poll.mu.Lock()
	defer c.poll.mu.Unlock()
	k, _ := c.pollCQ(len(c.poll.wcs))
	return k
}

// complete accounts for one work completion and keeps in c.poll.pending what
// Poll is to report (poll.mu held).
func (c *Conn) complete(wc *C.struct_rp_wc) {
	id := uint64(wc.wr_id)
	i := int(id & wrBufMax)
	ok := wc.status == C.IBV_WC_SUCCESS
	if !ok {
		c.fail(wcError(wc.status))
	}
	switch id & wrKind {
	case wrData:
		c.posts.send[i].Store(false)
		c.posts.sendsOut.Add(-1)
		if ok {
			c.poll.pending = append(c.poll.pending, conn.Completion{Op: conn.OpSend, Buf: i, Len: int(c.posts.sendLen[i].Load())})
		}
	case wrFwd:
		c.posts.sendsOut.Add(-1)
		if ok {
			c.poll.pending = append(c.poll.pending, conn.Completion{Op: conn.OpForward, Buf: i, Len: int(c.fwd.Load().sendLen[i].Load())})
		}
	case wrCtrl:
		c.posts.freeSlot(i)
	case wrRecv:
		c.posts.recv[i].Store(false)
		if ok {
			c.poll.pending = append(c.poll.pending, conn.Completion{Op: conn.OpRecv, Buf: i, Len: int(wc.byte_len)})
		}
	case wrNote:
		if ok {
			c.noted(i, wc)
		}
	}
}

// noted handles the completion of note receive k of a receiver's ring and
// re-posts it: a write into the ring slot its immediate names, or a control
// message, copied into the spare the ring's books give it. c.recvRing.rs checks both
// and says which completions are due.
func (c *Conn) noted(k int, wc *C.struct_rp_wc) {
	n := int(wc.byte_len)
	var err error
	c.recvRing.mu.Lock()
	if wc.write != 0 {
		slot := int(wc.imm)
		if c.split.size > 0 {
			slot, n = splitLen(uint32(wc.imm), n, c.split.size)
		}
		c.poll.pending, err = c.recvRing.rs.Write(c.poll.pending, slot, n)
	} else {
		var j int
		if j, c.poll.pending, err = c.recvRing.rs.Control(c.poll.pending, n, wc.has_imm != 0, uint32(wc.imm)); err == nil {
			copy(c.bufs.recv[j], c.recvRing.notes[k][:n])
		}
	}
	c.recvRing.mu.Unlock()
	if err != nil {
		c.violated(err.Error())
	}
	if rc := c.postNote(k); rc != 0 {
		c.fail(fmt.Sprintf("ibv_post_recv: %v", errno(rc)))
	}
}

// violated fails a receiver's connection whose sender broke the ring
// protocol, and disconnects, so that the sender fails too (as a SEND that
// does not fit fails both ends).
func (c *Conn) violated(what string) {
	c.fail(what + ": it broke the ring protocol")
	C.rdma_disconnect(c.id)
}

// wcError describes a failed work completion.
func wcError(status C.uint32_t) string {
	switch status {
	case C.IBV_WC_WR_FLUSH_ERR:
		return "peer disconnected"
	case C.IBV_WC_LOC_LEN_ERR:
		return "local length error (a message was larger than the receive buffer)"
	}
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}
