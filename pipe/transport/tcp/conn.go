// Package tcp is the TCP transport of rdmapipe: a conn.Conn over one TCP
// connection, with each message framed as a 4-byte little-endian length
// (its top bit set for a control message) followed by its bytes.
//
// A message is written by the goroutine that posts it when the socket is
// idle and takes it at once, else by a writer goroutine that sends queued
// messages in order, several per writev system call (see writer.go); a reader goroutine reads each message straight into the
// oldest posted receive buffer of its kind: a receiver keeps its last
// conn.SpareRecvs buffers, of conn.MaxControl bytes, for control messages,
// as the RDMA ring does, and allocates the others, its window, only when
// the engine opens it after authentication (conn.Window). A message for
// which no buffer is posted fails the connection: the engine never sends
// one (see conn.Conn), so only a peer that breaks the protocol does.
//
// While a message arrives, the reader sends the peer a pulse at most every
// pulseInterval: a header with pulseFrame and no body, which takes no
// receive buffer and reaches no engine. It proves that this process reads:
// the peer counts it as progress (Progress), so that one large message on
// a slow link may take longer than the engine's idle timeout in either
// direction, while a stopped process is still noticed at once.
package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// frameHeaderLen is the size of the length that precedes each message.
const frameHeaderLen = 4

// closeTimeout bounds how long Close waits for queued sends to be written.
const closeTimeout = 2 * time.Second

// readBufferSize is the size of the reader's buffer. Small messages (credits,
// control) are read many per system call; bytes of large ones beyond what
// is buffered are read directly into the receive buffer.
const readBufferSize = 16 << 10

// Conn is a conn.Conn over TCP. Its buffers are mapped outside the Go heap:
// the control buffers when the connection is made, a receiver's data
// buffers (its window) only when the engine opens it (see OpenWindow).
type Conn struct {
	nc     net.Conn
	info   conn.Info
	remote string

	sendBufs, recvBufs [][]byte
	ctrlBufs           [][]byte      // transport-owned memory for SendControl
	sendBusy           []atomic.Bool // posted and not yet reported by Poll
	recvBusy           []atomic.Bool
	// spareFrom is the first receive buffer for control messages: those
	// before it take data messages only, those from it control messages
	// only (a sender's are all for control messages).
	spareFrom int
	dataSize  int // the size of a data receive buffer, allocated by OpenWindow
	ctrlSize  int // the size of a control receive buffer

	queue      chan work     // messages for the writer, in order
	pulses     chan struct{} // a pulse for the writer to send (see pulseFrame)
	ctrlFree   chan int      // indices of free ctrlBufs
	postedData chan int      // posted data receive buffers, oldest first
	postedCtrl chan int      // posted control receive buffers, oldest first
	comps      chan conn.Completion
	closing    chan struct{} // closed by Close: the writer flushes and stops
	written    chan struct{} // closed when the writer has stopped
	done       chan struct{} // closed when the connection has failed or closed
	failOnce   sync.Once
	err        error // why done was closed; set before closing done
	closed     atomic.Bool
	closeMu    sync.Mutex
	wg         sync.WaitGroup

	br      *bufio.Reader
	arrived atomic.Int64         // bytes read from the socket, see Progress
	hdr     [frameHeaderLen]byte // the reader's frame header
	pulsed  time.Time            // when the reader last asked for a pulse

	wmu       sync.Mutex      // held while writing to the socket (see post)
	raw       syscall.RawConn // for tryWrite's non-blocking writev; nil if nc has none
	queued    atomic.Int64    // works queued and not yet taken by the writer
	directHdr [frameHeaderLen]byte
	iov       [2]unix.Iovec      // tryWrite's frame header and payload
	writev    func(uintptr) bool // c.writevIov, made once
	wn        int                // bytes writevIov wrote
	werr      error              // writevIov's error
	rest      net.Buffers        // what tryWrite could not write, for the writer to finish
	restWork  work               // the message rest belongs to

	vec   net.Buffers // the writer's gather list
	nb    net.Buffers // what writev consumes; a field so it does not escape per call
	hdrs  []byte      // the writer's frame headers
	batch []work

	adopted atomic.Pointer[conn.Conn] // whose receive buffers PostForward sends from

	windowOnce sync.Once
	mapMu      sync.Mutex
	maps       [][]byte // the mappings the buffers are carved from; unmapped by Close
}

// work is one message queued for the writer: send buffer buf, or control
// buffer buf if ctrl, holding n bytes.
type work struct {
	buf, n int
	ctrl   bool
	fwd    bool // buf is a receive buffer of the adopted connection
	resume bool // no message: the writer is to finish rest (see tryWrite)
}

// newConn makes a Conn over nc with buffers for layout l and the negotiated
// params p, whose peer has peerRecvBufs receive buffers, and starts its
// reader and writer. The last spares receive buffers take control
// messages, of at most conn.MaxControl bytes: with spares < l.RecvBufs (a
// receiver) the others, for data, are allocated by OpenWindow.
func newConn(nc net.Conn, l conn.Layout, p conn.Params, peerRecvBufs, spares int) (*Conn, error) {
	if tc, ok := nc.(*net.TCPConn); ok {
		// Go enables TCP_NODELAY by default; say so in case that changes.
		// Socket buffer sizes are left to the kernel's autotuning: setting
		// them disables it and caps them at net.core.[rw]mem_max.
		_ = tc.SetNoDelay(true)
	}
	ctrl := peerRecvBufs
	spareFrom := l.RecvBufs - spares
	c := &Conn{
		nc:         nc,
		remote:     nc.RemoteAddr().String(),
		spareFrom:  spareFrom,
		dataSize:   l.RecvSize,
		ctrlSize:   min(l.RecvSize, conn.MaxControl),
		recvBufs:   make([][]byte, l.RecvBufs),
		sendBusy:   make([]atomic.Bool, l.SendBufs),
		recvBusy:   make([]atomic.Bool, l.RecvBufs),
		queue:      make(chan work, l.SendBufs+ctrl+1), // +1: tryWrite's resume marker
		pulses:     make(chan struct{}, 1),
		ctrlFree:   make(chan int, ctrl),
		postedData: make(chan int, max(spareFrom, 0)),
		postedCtrl: make(chan int, spares),
		comps:      make(chan conn.Completion, 2*(l.SendBufs+l.RecvBufs)), // sends, forwards and receives
		closing:    make(chan struct{}),
		written:    make(chan struct{}),
		done:       make(chan struct{}),
		vec:        make(net.Buffers, 0, 2*(l.SendBufs+ctrl)),
		hdrs:       make([]byte, frameHeaderLen*(l.SendBufs+ctrl)),
		batch:      make([]work, 0, l.SendBufs+ctrl),
	}
	// Send buffers start on a page, so that what is read into them suits
	// O_DIRECT.
	send := roundUp(l.SendSize, pageSize)
	mem, err := c.mapBuffers(l.SendBufs*send + (ctrl+spares)*conn.MaxControl)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	c.sendBufs = carve(&mem, l.SendBufs, l.SendSize, send)
	c.ctrlBufs = carve(&mem, ctrl, conn.MaxControl, conn.MaxControl)
	copy(c.recvBufs[spareFrom:], carve(&mem, spares, c.ctrlSize, conn.MaxControl))
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
		c.writev = c.writevIov
	}
	c.br = bufio.NewReaderSize(countingReader{nc, &c.arrived}, readBufferSize)
	c.info = conn.Info{Transport: "tcp", Local: nc.LocalAddr().String(), Remote: c.remote, Chunk: p.Chunk, Depth: p.Depth}
	for i := range ctrl {
		c.ctrlFree <- i
	}
	for i := spareFrom; i < l.RecvBufs; i++ {
		c.recvBusy[i].Store(true)
		c.postedCtrl <- i
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// mapBuffers maps size bytes outside the Go heap, for Close to unmap, so
// that a relay's RDMA connection may register them to send from (see
// MappedRegions).
func (c *Conn) mapBuffers(size int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, max(size, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: "allocate buffers for " + c.remote,
			Err: errors.Join(fmt.Errorf("mmap %d bytes: %w", size, err), conn.ErrLocal)}
	}
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	c.maps = append(c.maps, mem)
	return mem, nil
}

// OpenWindow allocates a receiver's data receive buffers and posts them;
// until then a data message from the peer fails the connection. Data
// buffers start on a page, so that payloads, which start their messages,
// suit O_DIRECT and pwrite. It returns no description: the sender needs
// none. Only the first call does anything.
func (c *Conn) OpenWindow() ([]byte, error) {
	var err error
	c.windowOnce.Do(func() {
		if err = c.usable(); err != nil {
			return
		}
		size := roundUp(c.dataSize, pageSize)
		var mem []byte
		if mem, err = c.mapBuffers(c.spareFrom * size); err != nil {
			return
		}
		copy(c.recvBufs, carve(&mem, c.spareFrom, c.dataSize, size))
		for i := range c.spareFrom {
			c.recvBusy[i].Store(true)
			c.postedData <- i
		}
	})
	return nil, err
}

// MappedRegions returns the regions, mapped outside the Go heap, that hold
// the connection's buffers: they stay where they are until Close.
func (c *Conn) MappedRegions() [][]byte {
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	return slices.Clone(c.maps)
}

// carve cuts n buffers of size bytes, stride bytes apart, off the front of
// *mem.
func carve(mem *[]byte, n, size, stride int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = (*mem)[:size:size]
		*mem = (*mem)[stride:]
	}
	return bufs
}

// pageSize is the alignment of data buffers.
const pageSize = 4096

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// SendBuf returns send buffer i.
func (c *Conn) SendBuf(i int) []byte { return c.sendBufs[i] }

// RecvBuf returns receive buffer i.
func (c *Conn) RecvBuf(i int) []byte { return c.recvBufs[i] }

// SendBufs returns how many send buffers the connection has.
func (c *Conn) SendBufs() int { return len(c.sendBufs) }

// RecvBufs returns how many receive buffers the connection has.
func (c *Conn) RecvBufs() int { return len(c.recvBufs) }

// Info describes the connection.
func (c *Conn) Info() conn.Info { return c.info }

// fail records err as the reason the connection ended, unless one was
// recorded before, and tears the socket down so that the peer notices.
func (c *Conn) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.done)
		_ = c.nc.Close()
	})
}

// lastWords is how long a failed write leaves the reader to deliver what
// the peer sent before it went.
const lastWords = 500 * time.Millisecond

// failSoon fails the connection with err after lastWords, unless the reader
// fails it first. A write fails when the peer has gone (often with a reset
// because it closed with our data unread), and what it sent before going,
// such as an abort message that says why, is still to be read and reported.
func (c *Conn) failSoon(err error) {
	go func() {
		t := time.NewTimer(lastWords)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			c.fail(err)
		}
	}()
}

// Close waits up to two seconds for queued sends to be written, then closes
// the connection and waits for its goroutines. It unblocks a pending Poll,
// which returns conn.ErrClosed. Close may be called more than once.
func (c *Conn) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	close(c.closing)
	t := time.NewTimer(closeTimeout)
	select {
	case <-c.written:
	case <-c.done:
	case <-t.C:
	}
	t.Stop()
	c.fail(conn.ErrClosed)
	c.wg.Wait()
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	var err error
	for _, m := range c.maps {
		err = errors.Join(err, unix.Munmap(m))
	}
	c.maps = nil
	return err
}
