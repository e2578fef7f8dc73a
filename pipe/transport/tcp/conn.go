// Package tcp is the TCP transport of rdmapipe: a conn.Conn over one TCP
// connection, with each message framed as a 4-byte little-endian length
// (its top bit set for a control message) followed by its bytes.
//
// A message is written by the goroutine that posts it when the socket is
// idle and takes it at once (see direct.go), else by a writer goroutine
// that sends queued messages in order, several per writev system call (see
// writer.go); a reader goroutine reads each message straight into the
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
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// frameHeaderLen is the size of the length that precedes each message.
const frameHeaderLen = 4

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

	bufs buffers // the buffers, whether each is posted, and their memory
	in   reader  // the reader goroutine's state
	life life    // failure and Close

	queue      chan work     // messages for the writer, in order
	queued     atomic.Int64  // works queued and not yet taken by the writer
	pulses     chan struct{} // a pulse for the writer to send (see pulseFrame)
	ctrlFree   chan int      // indices of free ctrlBufs
	postedData chan int      // posted data receive buffers, oldest first
	postedCtrl chan int      // posted control receive buffers, oldest first
	comps      chan conn.Completion

	wmu    sync.Mutex // held while writing to the socket (see post)
	direct direct     // the state of a write by the posting goroutine (see tryWrite)
	batch  batcher    // the writer goroutine's gather list

	adopted atomic.Pointer[conn.Conn] // whose receive buffers PostForward sends from
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
	pulses := make(chan struct{}, 1)
	c := &Conn{
		nc:         nc,
		remote:     nc.RemoteAddr().String(),
		bufs:       newBuffers(l, spares),
		in:         reader{pulses: pulses},
		life:       newLife(),
		queue:      make(chan work, l.SendBufs+ctrl+1), // +1: tryWrite's resume marker
		pulses:     pulses,
		ctrlFree:   make(chan int, ctrl),
		postedData: make(chan int, max(spareFrom, 0)),
		postedCtrl: make(chan int, spares),
		comps:      make(chan conn.Completion, 2*(l.SendBufs+l.RecvBufs)), // sends, forwards and receives
		batch:      newBatcher(l.SendBufs + ctrl),
	}
	if err := c.bufs.mapFixed(l, ctrl, spares, c.remote); err != nil {
		_ = nc.Close()
		return nil, err
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.direct.raw, _ = sc.SyscallConn()
		c.direct.writev = c.direct.writevIov
	}
	var src io.Reader = nc
	if c.direct.raw != nil {
		src = newRawReader(nc, c.direct.raw)
	}
	c.in.br = bufio.NewReaderSize(countingReader{src, &c.in.arrived}, readBufferSize)
	c.info = conn.Info{Transport: "tcp", Local: nc.LocalAddr().String(), Remote: c.remote, Chunk: p.Chunk, Depth: p.Depth, Copies: true}
	for i := range ctrl {
		c.ctrlFree <- i
	}
	for i := spareFrom; i < l.RecvBufs; i++ {
		c.bufs.recvBusy[i].Store(true)
		c.postedCtrl <- i
	}
	c.life.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// OpenWindow allocates a receiver's data receive buffers and posts them;
// until then a data message from the peer fails the connection. Data
// buffers start on a page, so that payloads, which start their messages,
// suit O_DIRECT and pwrite. It returns no description: the sender needs
// none. Only the first call does anything.
func (c *Conn) OpenWindow() ([]byte, error) {
	var err error
	c.bufs.windowOnce.Do(func() {
		if err = c.life.usable(); err != nil {
			return
		}
		if err = c.bufs.mapWindow(c.remote); err != nil {
			return
		}
		for i := range c.bufs.spareFrom {
			c.postedData <- i
		}
	})
	return nil, err
}

// SendBuf returns send buffer i.
func (c *Conn) SendBuf(i int) []byte { return c.bufs.send[i] }

// RecvBuf returns receive buffer i.
func (c *Conn) RecvBuf(i int) []byte { return c.bufs.recv[i] }

// SendBufs returns how many send buffers the connection has.
func (c *Conn) SendBufs() int { return len(c.bufs.send) }

// RecvBufs returns how many receive buffers the connection has.
func (c *Conn) RecvBufs() int { return len(c.bufs.recv) }

// MappedRegions returns the regions, mapped outside the Go heap, that hold
// the connection's buffers: they stay where they are until Close.
func (c *Conn) MappedRegions() [][]byte { return c.bufs.regions() }

// Info describes the connection.
func (c *Conn) Info() conn.Info { return c.info }
