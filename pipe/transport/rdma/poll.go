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

// Poll waits for completions and stores up to len(cs) of them. Control
// message completions are handled internally and never reported. A failed
// work request fails the connection: completions before it are still
// reported, then Poll returns the failure. After Close it returns
// conn.ErrClosed. An empty cs is an error.
func (c *Conn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	if len(cs) == 0 {
		return 0, conn.Errorf(conn.KindInternal, "poll connection to "+c.peer, "no room for completions")
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closing.Load() {
		return 0, conn.ErrClosed
	}
	for spin := 0; ; spin++ {
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		if c.opt.BusyPoll {
			if spin%busyCheck == 0 {
				c.pollWaits.Add(1)
				if err := c.stopped(); err != nil {
					return c.last(cs, err)
				}
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				runtime.Gosched()
			}
			continue
		}
		if err := c.stopped(); err != nil {
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
		c.pollWaits.Add(1)
		if err := c.cqW.wait(ctx, c.stopped, c.cqEvent); err != nil {
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
	for _, cq := range c.cqs {
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
	got := c.cqEventOf(c.cc, c.cq, &c.unacked)
	for _, n := range c.nics {
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
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	n := c.take(cs)
	for n < len(cs) {
		want := min(len(c.wcs), len(cs)-n)
		k, ok := c.pollCQ(want)
		n += c.take(cs[n:])
		if !ok || k < want {
			break
		}
	}
	return n
}

// pollCQ takes up to want completions from the CQs and accounts for them
// (cqMu held), starting with a different CQ each time when there are
// several (see nics.go), so that none waits behind a busy one. It returns
// how many it took, and false if ibv_poll_cq failed, which fails the
// connection: the completions taken before the failure are still
// accounted for.
func (c *Conn) pollCQ(want int) (int, bool) {
	got := 0
	for j := range c.cqs {
		var rc, eno C.int
		k := int(C.rp_poll(c.cqs[(c.cqTurn+j)%len(c.cqs)], &c.wcs[0], C.int(want-got), &rc, &eno))
		for i := range k {
			c.complete(&c.wcs[i])
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
	if len(c.cqs) > 1 {
		c.cqTurn = (c.cqTurn + 1) % len(c.cqs)
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
func (c *Conn) take(cs []conn.Completion) int {
	n := copy(cs, c.pending)
	c.pending = c.pending[n:]
	return n
}

// drain takes completions from the CQ for SendControl and Close, keeping
// those Poll must report. It returns how many it took.
func (c *Conn) drain() int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	k, _ := c.pollCQ(len(c.wcs))
	return k
}

// complete accounts for one work completion and keeps in c.pending what
// Poll is to report (cqMu held).
func (c *Conn) complete(wc *C.struct_rp_wc) {
	id := uint64(wc.wr_id)
	i := int(id & wrBufMax)
	ok := wc.status == C.IBV_WC_SUCCESS
	if !ok {
		c.fail(wcError(wc.status))
	}
	switch id & wrKind {
	case wrData:
		c.sendPosted[i].Store(false)
		c.sendsOut.Add(-1)
		if ok {
			c.pending = append(c.pending, conn.Completion{Op: conn.OpSend, Buf: i, Len: int(c.sendLen[i].Load())})
		}
	case wrFwd:
		c.sendsOut.Add(-1)
		if ok {
			c.pending = append(c.pending, conn.Completion{Op: conn.OpForward, Buf: i, Len: int(c.fwd.Load().sendLen[i].Load())})
		}
	case wrCtrl:
		c.freeSlot(i)
	case wrRecv:
		c.recvPosted[i].Store(false)
		if ok {
			c.pending = append(c.pending, conn.Completion{Op: conn.OpRecv, Buf: i, Len: int(wc.byte_len)})
		}
	case wrNote:
		if ok {
			c.noted(i, wc)
		}
	}
}

// noted handles the completion of note receive k of a receiver's ring and
// re-posts it: a write into the ring slot its immediate names, or a control
// message, copied into the spare the ring's books give it. c.rs checks both
// and says which completions are due.
func (c *Conn) noted(k int, wc *C.struct_rp_wc) {
	n := int(wc.byte_len)
	var err error
	c.ringMu.Lock()
	if wc.write != 0 {
		slot := int(wc.imm)
		if c.split > 0 {
			slot, n = splitLen(uint32(wc.imm), n, c.split)
		}
		c.pending, err = c.rs.Write(c.pending, slot, n)
	} else {
		var j int
		if j, c.pending, err = c.rs.Control(c.pending, n, wc.has_imm != 0, uint32(wc.imm)); err == nil {
			copy(c.recv[j], c.notes[k][:n])
		}
	}
	c.ringMu.Unlock()
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
