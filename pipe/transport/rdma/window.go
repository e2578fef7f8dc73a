package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// recvWindow is a receiver's window: its data receive buffers,
// bufs.recv[:count], mapped and registered (for remote writes with a ring)
// by OpenWindow, in a region of their own; until then they are nil and a
// data message fails the connection.
type recvWindow struct {
	count    int
	once     sync.Once
	err      error
	open     atomic.Bool
	mem      []byte
	mr       *C.struct_ibv_mr
	lkey     C.uint32_t
	dataSize int // the size of a data receive buffer
}

// OpenWindow maps and registers a receiver's data receive buffers, its
// window, in a region of their own, and posts them. With a ring it is the
// only memory the peer may write into, registered for remote writes only
// now that the engine has authenticated the sender and the receiver is
// claimed; it returns the ring's description, which the sender's Conn
// needs (see SetWindow). On the SEND data path the buffers are posted
// behind the spares and the description is nil. Only the first call does
// anything.
func (c *Conn) OpenWindow() ([]byte, error) {
	c.win.once.Do(func() { c.win.err = c.openWindow() })
	if c.win.err != nil || c.recvRing.slots == 0 {
		return nil, c.win.err
	}
	return c.offer().marshal(), nil
}

// openWindow does the work of OpenWindow.
func (c *Conn) openWindow() error {
	op := "open the receive window for " + c.peer
	if c.win.count == 0 {
		return conn.Errorf(conn.KindInternal, op, "a sender's connection has no window")
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	stride, size := roundUp(c.win.dataSize, bufAlign), windowSize(c.win.count, c.win.dataSize)
	mem, err := mapRegion(size)
	if err != nil {
		return &conn.Error{Kind: conn.KindSetup, Op: op, Err: local(fmt.Errorf("map %d bytes of buffers: %w", size, err))}
	}
	c.win.mem = mem
	if c.win.mr, err = register(c.pd, mem, c.recvRing.slots > 0); err != nil {
		return &conn.Error{Kind: conn.KindSetup, Op: op, Err: local(err)}
	}
	c.win.lkey = c.win.mr.lkey
	for _, n := range c.devs.nics {
		if n.winMR, err = register(n.pd, mem, c.recvRing.slots > 0); err != nil {
			return &conn.Error{Kind: conn.KindSetup, Op: op, Err: local(fmt.Errorf("%s: %w", n.name(), err))}
		}
	}
	c.bufs.pinned.Add(int64(len(mem)))
	for i := range c.win.count {
		c.bufs.recv[i] = mem[i*stride : i*stride+c.win.dataSize : i*stride+c.win.dataSize]
	}
	c.win.open.Store(true)
	if c.recvRing.slots > 0 {
		c.recvRing.open()
		return nil
	}
	for i := range c.win.count {
		c.posts.recv[i].Store(true)
		if rc := c.postRecv(i); rc != 0 {
			err := fmt.Errorf("ibv_post_recv: %w", errno(rc))
			c.fail(err.Error())
			return &conn.Error{Kind: conn.KindAborted, Op: op, Err: err}
		}
	}
	return nil
}
