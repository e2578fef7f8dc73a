package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// adopted is another connection's receive memory registered with this
// connection's protection domain, so that a relay sends from it (see
// pipe.Forwarder).
type adopted struct {
	up      pipe.Conn
	mr      *C.struct_ibv_mr
	lkey    C.uint32_t
	sendLen []atomic.Int32 // bytes posted per adopted buffer, for OpForward
}

// mappedBuffers is implemented by connections whose receive buffers are
// mapped outside the Go heap (mmap) and stay where they are until Close.
// Only such memory may be registered with the HCA: the device reads it
// behind the garbage collector's back, which may free and reuse heap
// memory it finds unreferenced.
type mappedBuffers interface {
	MappedBuffers() bool
}

// MappedBuffers reports that c's buffers are mapped outside the Go heap
// (see mem.go), so that another connection may adopt them.
func (c *Conn) MappedBuffers() bool { return true }

// Adopt registers the span of up's receive buffers (one mapped region, for
// the rdma and tcp transports) with this connection's protection domain,
// for PostForward. It refuses a connection that does not report, by a
// MappedBuffers method, that its buffers are mapped outside the Go heap,
// and fails where the span cannot be registered.
func (c *Conn) Adopt(up pipe.Conn) error {
	if m, ok := up.(mappedBuffers); !ok || !m.MappedBuffers() {
		return fmt.Errorf("adopt: the other connection's receive buffers may be Go heap memory, which must not be registered")
	}
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
	if c.fwd.Load() != nil {
		return fmt.Errorf("adopt: already adopted")
	}
	base := unsafe.Pointer(unsafe.SliceData(up.RecvBuf(0)))
	base = unsafe.Add(base, -int(uintptr(base)-lo))
	mr, err := C.rp_reg_mr(c.pd, base, C.size_t(hi-lo), 0)
	if mr == nil {
		return fmt.Errorf("adopt: register the %d bytes of the other connection's receive buffers: ibv_reg_mr: %w", hi-lo, err)
	}
	c.fwd.Store(&adopted{up: up, mr: mr, lkey: mr.lkey, sendLen: make([]atomic.Int32, up.RecvBufs())})
	return nil
}

// PostForward posts the first n bytes of the adopted connection's receive
// buffer i as PostSend posts a send buffer; its completion is reported as
// pipe.OpForward with Buf i and Len n.
func (c *Conn) PostForward(i, n int) error {
	f := c.fwd.Load()
	if f == nil || i < 0 || i >= f.up.RecvBufs() || n < 0 || n > len(f.up.RecvBuf(i)) || c.ring != nil && n > int(c.ring.stride) {
		return pipe.Errorf(pipe.KindInternal, "post forward to "+c.peer, "adopted buffer %d, %d bytes: out of range", i, n)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	f.sendLen[i].Store(int32(n))
	c.sendsOut.Add(1)
	if rc := c.postData(wrFwd|uint64(i), unsafe.Pointer(unsafe.SliceData(f.up.RecvBuf(i))), n, f.lkey); rc != 0 {
		c.sendsOut.Add(-1)
		return &pipe.Error{Kind: pipe.KindAborted, Op: "post forward to " + c.peer, Err: fmt.Errorf("ibv_post_send: %w", errno(rc))}
	}
	return nil
}
