package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"

	"github.com/rdmapipe/rdmapipe/pipe"
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
// pipe.ErrClosed. An empty cs is an error.
func (c *Conn) Poll(ctx context.Context, cs []pipe.Completion) (int, error) {
	if len(cs) == 0 {
		return 0, pipe.Errorf(pipe.KindInternal, "poll connection to "+c.peer, "no room for completions")
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closing.Load() {
		return 0, pipe.ErrClosed
	}
	for spin := 0; ; spin++ {
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		if c.opt.BusyPoll {
			if spin%busyCheck == 0 {
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
		// Arm the channel, then poll once more: a completion that arrived
		// before arming raises no event.
		if rc := C.rp_arm(c.cq); rc != 0 {
			c.fail(fmt.Sprintf("ibv_req_notify_cq: %v", errno(rc)))
			continue
		}
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
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
func (c *Conn) last(cs []pipe.Completion, err error) (int, error) {
	if n := c.reap(cs); n > 0 {
		return n, nil
	}
	return 0, err
}

// cqEvent takes one event from the completion channel, if there is one.
// Events are acknowledged in batches; one event may stand for many
// completions.
func (c *Conn) cqEvent() bool {
	rc := C.rp_get_cq_event(c.cc)
	switch {
	case rc == 0:
		return false
	case rc < 0:
		c.fail(fmt.Sprintf("ibv_get_cq_event: %v", errno(rc)))
		return true
	}
	if c.unacked++; c.unacked >= ackBatch {
		C.ibv_ack_cq_events(c.cq, C.uint(c.unacked))
		c.unacked = 0
	}
	return true
}

// reap fills cs with kept and new completions.
func (c *Conn) reap(cs []pipe.Completion) int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	n := c.take(cs)
	for n < len(cs) {
		want := min(len(c.wcs), len(cs)-n)
		k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(want)))
		if k < 0 {
			c.fail(fmt.Sprintf("ibv_poll_cq: %v", errno(C.int(k))))
			break
		}
		for i := range k {
			c.complete(&c.wcs[i])
		}
		n += c.take(cs[n:])
		if k < want {
			break
		}
	}
	return n
}

// take moves kept completions into cs and returns how many.
func (c *Conn) take(cs []pipe.Completion) int {
	n := copy(cs, c.pending)
	c.pending = c.pending[n:]
	return n
}

// drain takes completions from the CQ for SendControl and Close, keeping
// those Poll must report. It returns how many it took.
func (c *Conn) drain() int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(len(c.wcs))))
	for i := range k {
		c.complete(&c.wcs[i])
	}
	return max(k, 0)
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
			c.pending = append(c.pending, pipe.Completion{Op: pipe.OpSend, Buf: i, Len: int(c.sendLen[i].Load())})
		}
	case wrFwd:
		c.sendsOut.Add(-1)
		if ok {
			c.pending = append(c.pending, pipe.Completion{Op: pipe.OpForward, Buf: i})
		}
	case wrCtrl:
		c.freeSlot(i)
	case wrRecv:
		c.recvPosted[i].Store(false)
		if ok {
			c.pending = append(c.pending, pipe.Completion{Op: pipe.OpRecv, Buf: i, Len: int(wc.byte_len)})
		}
	case wrNote:
		if ok {
			c.noted(i, wc)
		}
	}
}

// noted handles the completion of note receive k of a receiver's ring and
// re-posts it: a write into the ring slot its immediate names (checked and
// put in ring order by c.order), or a control message, copied into the
// oldest posted spare.
func (c *Conn) noted(k int, wc *C.struct_rp_wc) {
	if wc.write != 0 {
		c.wrote(int(wc.imm), int(wc.byte_len))
	} else if j, ok := c.takeSpare(wc); ok {
		comp := pipe.Completion{Op: pipe.OpRecv, Buf: j, Len: copy(c.recv[j], c.notes[k][:wc.byte_len])}
		c.control(comp, wc.has_imm != 0, uint32(wc.imm))
	}
	if rc := c.postNote(k); rc != 0 {
		c.fail(fmt.Sprintf("ibv_post_recv: %v", errno(rc)))
	}
}

// wrote accepts a write of n bytes into ring slot: it must be a posted
// slot, not written since, and, with a single lane, the slot that is due.
func (c *Conn) wrote(slot, n int) {
	switch {
	case slot < 0 || slot >= c.slots:
		c.violated(fmt.Sprintf("the peer wrote to ring slot %d of %d", slot, c.slots))
	case len(c.qps) == 1 && slot != c.nextWrite:
		c.violated(fmt.Sprintf("the peer wrote ring slot %d where slot %d was due", slot, c.nextWrite))
	case !c.recvPosted[slot].Load() || c.order.arrived[slot] >= 0:
		c.violated(fmt.Sprintf("the peer wrote ring slot %d before the receiver freed it", slot))
	case n > len(c.recv[slot]):
		c.violated(fmt.Sprintf("the peer wrote %d bytes into a %d-byte ring slot", n, len(c.recv[slot])))
	default:
		c.order.arrived[slot] = n
		c.deliver()
	}
}

// takeSpare takes the oldest posted spare for the control message wc
// reports.
func (c *Conn) takeSpare(wc *C.struct_rp_wc) (int, bool) {
	c.ringMu.Lock()
	defer c.ringMu.Unlock()
	if len(c.spares) == 0 {
		c.violated(fmt.Sprintf("the peer sent more control messages than the receiver had room for (this one: %d bytes, immediate %v %d)",
			wc.byte_len, wc.has_imm != 0, wc.imm))
		return 0, false
	}
	j := c.spares[0]
	c.spares = c.spares[1:]
	c.recvPosted[j].Store(false)
	return j, true
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
