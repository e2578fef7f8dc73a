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
	n := copy(cs, c.pending)
	c.pending = c.pending[n:]
	for n < len(cs) {
		want := min(len(c.wcs), len(cs)-n)
		k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(want)))
		if k < 0 {
			c.fail(fmt.Sprintf("ibv_poll_cq: %v", errno(C.int(k))))
			break
		}
		for i := range k {
			if comp, ok := c.complete(&c.wcs[i]); ok {
				cs[n] = comp
				n++
			}
		}
		if k < want {
			break
		}
	}
	return n
}

// drain takes completions from the CQ for SendControl and Close, keeping
// those Poll must report. It returns how many it took.
func (c *Conn) drain() int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(len(c.wcs))))
	for i := range k {
		if comp, ok := c.complete(&c.wcs[i]); ok {
			c.pending = append(c.pending, comp)
		}
	}
	return max(k, 0)
}

// complete accounts for one work completion and returns what to report.
func (c *Conn) complete(wc *C.struct_rp_wc) (pipe.Completion, bool) {
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
			return pipe.Completion{Op: pipe.OpSend, Buf: i, Len: int(c.sendLen[i].Load())}, true
		}
	case wrCtrl:
		c.freeSlot(i)
	case wrRecv:
		c.recvPosted[i].Store(false)
		if ok {
			return pipe.Completion{Op: pipe.OpRecv, Buf: i, Len: int(wc.byte_len)}, true
		}
	}
	return pipe.Completion{}, false
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
