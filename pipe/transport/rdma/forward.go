package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// adopted is another connection's receive memory registered with this
// connection's protection domain, so that a relay sends from it (see
// pipe.Forwarder).
type adopted struct {
	up   pipe.Conn
	mr   *C.struct_ibv_mr
	lkey C.uint32_t
}

// Adopt registers the span of up's receive buffers (one mapped region, for
// the rdma and tcp transports) with this connection's protection domain,
// for PostForward. It fails where that span cannot be registered.
func (c *Conn) Adopt(up pipe.Conn) error {
	if up.RecvBufs() == 0 {
		return fmt.Errorf("adopt: no receive buffers")
	}
	lo, hi := ^uintptr(0), uintptr(0)
	for i := range up.RecvBufs() {
		b := up.RecvBuf(i)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		lo, hi = min(lo, p), max(hi, p+uintptr(len(b)))
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	if c.fwd != nil {
		return fmt.Errorf("adopt: already adopted")
	}
	base := unsafe.Pointer(unsafe.SliceData(up.RecvBuf(0)))
	base = unsafe.Add(base, -int(uintptr(base)-lo))
	mr, err := C.rp_reg_mr(c.pd, base, C.size_t(hi-lo), 0)
	if mr == nil {
		return fmt.Errorf("adopt: register the %d bytes of the other connection's receive buffers: ibv_reg_mr: %w", hi-lo, err)
	}
	c.fwd = &adopted{up: up, mr: mr, lkey: mr.lkey}
	return nil
}

// PostForward posts the first n bytes of the adopted connection's receive
// buffer i as PostSend posts a send buffer; its completion is reported as
// pipe.OpForward.
func (c *Conn) PostForward(i, n int) error {
	f := c.fwd
	if f == nil || i < 0 || i >= f.up.RecvBufs() || n < 0 || n > len(f.up.RecvBuf(i)) || c.ring != nil && n > int(c.ring.stride) {
		return pipe.Errorf(pipe.KindInternal, "post forward to "+c.peer, "adopted buffer %d, %d bytes: out of range", i, n)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	c.sendsOut.Add(1)
	addr := unsafe.Pointer(unsafe.SliceData(f.up.RecvBuf(i)))
	var rc C.int
	if r := c.ring; r != nil {
		k := c.writes.Add(1) - 1
		slot := k % uint64(r.slots)
		rc = C.rp_post_write_imm(c.qps[k%uint64(len(c.qps))], C.uint64_t(wrFwd|uint64(i)), addr, C.uint32_t(n), f.lkey,
			C.uint64_t(r.addr+slot*uint64(r.stride)), C.uint32_t(r.rkey), C.uint32_t(slot))
	} else {
		rc = C.rp_post_send(c.qp, C.uint64_t(wrFwd|uint64(i)), addr, C.uint32_t(n), f.lkey, 0, 0, 0)
	}
	if rc != 0 {
		c.sendsOut.Add(-1)
		return &pipe.Error{Kind: pipe.KindAborted, Op: "post forward to " + c.peer, Err: fmt.Errorf("ibv_post_send: %w", errno(rc))}
	}
	return nil
}
