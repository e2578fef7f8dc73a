package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// closeTimeout bounds how long Close waits for queued sends.
const closeTimeout = 2 * time.Second

// life is how a connection ends: its first failure, and Close.
type life struct {
	// mu is held shared by every operation that touches the queue pair
	// or completion queue and exclusively while Close frees them.
	mu        sync.RWMutex
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	monDone   chan struct{} // closed when the CM event monitor ends

	errMu sync.Mutex
	err   error // first failure of the connection
}

// record records err as the first failure, unless there was one.
func (l *life) record(err error) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// stopped returns conn.ErrClosed after Close, else the connection's failure.
func (l *life) stopped() error {
	if l.closing.Load() {
		return conn.ErrClosed
	}
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// failed reports whether the connection has failed.
func (l *life) failed() bool {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err != nil
}

// fail records the first failure of the connection and wakes Poll.
func (c *Conn) fail(cause string) {
	c.life.record(&conn.Error{Kind: conn.KindAborted, Op: "connection to " + c.peer + " lost", Err: errors.New(cause)})
	if c.cqW != nil {
		c.cqW.interrupt()
	}
}

// Close waits up to two seconds for queued sends to complete, disconnects,
// unblocks a pending Poll and frees everything. It is safe to call more
// than once and from several goroutines.
func (c *Conn) Close() error {
	c.life.closeOnce.Do(func() {
		c.life.closing.Store(true)
		c.cqW.interrupt()
		deadline := time.Now().Add(closeTimeout)
		for (c.posts.sendsOut.Load() > 0 || c.posts.ctrlBusy()) && !c.life.failed() && time.Now().Before(deadline) {
			if c.drain() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		C.rdma_disconnect(c.id)
		for _, id := range c.lanes.ids {
			C.rdma_disconnect(id)
		}
		c.life.mu.Lock()
		defer c.life.mu.Unlock()
		c.life.closeErr = c.free()
	})
	return c.life.closeErr
}

// free releases whatever setup created, in dependency order. It is used by
// Close and by failed setups.
func (c *Conn) free() error {
	var errs []error
	check := func(what string, rc C.int, err error) {
		if rc != 0 {
			if err == nil {
				err = syscall.Errno(max(rc, -rc))
			}
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if c.life.monDone != nil {
		c.cm.w.close()
		<-c.life.monDone
	}
	if c.id != nil && c.id.qp != nil {
		C.rdma_destroy_qp(c.id)
	}
	for _, id := range c.lanes.ids {
		if id.qp != nil {
			C.rdma_destroy_qp(id)
		}
	}
	if c.cq != nil {
		if c.poll.unacked > 0 {
			C.ibv_ack_cq_events(c.cq, C.uint(c.poll.unacked))
		}
		rc, err := C.ibv_destroy_cq(c.cq)
		check("ibv_destroy_cq", rc, err)
	}
	c.cqW.close()
	if c.cc != nil {
		rc, err := C.ibv_destroy_comp_channel(c.cc)
		check("ibv_destroy_comp_channel", rc, err)
	}
	if c.bufs.mr != nil {
		rc, err := C.ibv_dereg_mr(c.bufs.mr)
		check("ibv_dereg_mr", rc, err)
	}
	if c.win.mr != nil {
		rc, err := C.ibv_dereg_mr(c.win.mr)
		check("ibv_dereg_mr", rc, err)
	}
	if f := c.fwd.Load(); f != nil {
		for _, mr := range f.mrs {
			rc, err := C.ibv_dereg_mr(mr)
			check("ibv_dereg_mr", rc, err)
		}
	}
	if c.pd != nil {
		rc, err := C.ibv_dealloc_pd(c.pd)
		check("ibv_dealloc_pd", rc, err)
	}
	for _, n := range c.devs.nics {
		n.free(check)
	}
	if c.id != nil {
		rc, err := C.rdma_destroy_id(c.id)
		check("rdma_destroy_id", rc, err)
	}
	for _, id := range c.lanes.ids {
		rc, err := C.rdma_destroy_id(id)
		check("rdma_destroy_id", rc, err)
	}
	c.cm.destroy()
	for _, mem := range [][]byte{c.bufs.mem, c.win.mem} {
		if mem != nil {
			if err := unmapRegion(mem); err != nil {
				errs = append(errs, fmt.Errorf("munmap: %w", err))
			}
		}
	}
	if len(errs) > 0 {
		return &conn.Error{Kind: conn.KindInternal, Op: "close connection to " + c.peer, Err: errors.Join(errs...)}
	}
	return nil
}
