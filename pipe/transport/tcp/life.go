package tcp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// closeTimeout bounds how long Close waits for queued sends to be written.
const closeTimeout = 2 * time.Second

// lastWords is how long a failed write leaves the reader to deliver what
// the peer sent before it went.
const lastWords = 500 * time.Millisecond

// life is how a connection ends: failed, closed, or both.
type life struct {
	closing  chan struct{} // closed by Close: the writer flushes and stops
	written  chan struct{} // closed when the writer has stopped
	done     chan struct{} // closed when the connection has failed or closed
	failOnce sync.Once
	err      error // why done was closed; set before closing done
	closed   atomic.Bool
	closeMu  sync.Mutex
	wg       sync.WaitGroup // the reader and the writer
}

// newLife returns the life of a connection that has neither failed nor
// closed.
func newLife() life {
	return life{closing: make(chan struct{}), written: make(chan struct{}), done: make(chan struct{})}
}

// usable returns nil while work may be posted, else why not.
func (l *life) usable() error {
	if l.closed.Load() {
		return conn.ErrClosed
	}
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

// fail records err as the reason the connection ended, unless one was
// recorded before, and tears the socket down so that the peer notices.
func (c *Conn) fail(err error) {
	c.life.failOnce.Do(func() {
		c.life.err = err
		close(c.life.done)
		_ = c.nc.Close()
	})
}

// failSoon fails the connection with err after lastWords, unless the reader
// fails it first. A write fails when the peer has gone (often with a reset
// because it closed with our data unread), and what it sent before going,
// such as an abort message that says why, is still to be read and reported.
func (c *Conn) failSoon(err error) {
	go func() {
		t := time.NewTimer(lastWords)
		defer t.Stop()
		select {
		case <-c.life.done:
		case <-t.C:
			c.fail(err)
		}
	}()
}

// Close waits up to two seconds for queued sends to be written, then closes
// the connection and waits for its goroutines. It unblocks a pending Poll,
// which returns conn.ErrClosed. Close may be called more than once.
func (c *Conn) Close() error {
	c.life.closeMu.Lock()
	defer c.life.closeMu.Unlock()
	if c.life.closed.Swap(true) {
		return nil
	}
	close(c.life.closing)
	t := time.NewTimer(closeTimeout)
	select {
	case <-c.life.written:
	case <-c.life.done:
	case <-t.C:
	}
	t.Stop()
	c.fail(conn.ErrClosed)
	c.life.wg.Wait()
	return c.bufs.unmap()
}
