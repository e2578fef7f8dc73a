package tcp

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"syscall"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// maxBatchBytes is where the writer stops adding queued messages to one
// writev: small messages share a system call, while a large one is reported
// sent as soon as it is written rather than after its successors.
const maxBatchBytes = 64 << 10

// Messages reach the socket in one of two ways. post writes a message
// itself when the writer goroutine is idle and nothing is queued (the
// common case of a message now and then: a line typed into a stream, a
// handshake message), which saves waking the writer; it never blocks: what
// the socket does not take at once is left in rest for the writer, which
// finishes it before anything else. Otherwise the message is queued for
// writeLoop, which batches. wmu is held by whoever writes to the socket.

// post sends w: directly if it can (see tryWrite), else through the queue.
func (c *Conn) post(w work) {
	if !c.tryWrite(w) {
		c.queued.Add(1)
		c.queue <- w
	}
}

// tryWrite writes w's frame at once, without blocking, when the writer is
// idle and nothing is queued or left unfinished; it reports whether it
// took w. Bytes the socket does not take are left in rest, and a resume
// marker is queued so that the writer finishes them.
func (c *Conn) tryWrite(w work) bool {
	if c.raw == nil || c.queued.Load() != 0 || !c.wmu.TryLock() {
		return false
	}
	defer c.wmu.Unlock()
	if c.queued.Load() != 0 || c.rest != nil {
		return false
	}
	frameHeader(c.directHdr[:], w.n, w.ctrl)
	bufs := [2][]byte{c.directHdr[:], c.payload(w)}
	for k, b := range bufs {
		c.iov[k] = unix.Iovec{}
		c.iov[k].SetLen(len(b))
		if len(b) > 0 {
			c.iov[k].Base = &b[0]
		}
	}
	c.wn, c.werr = 0, nil
	err := c.raw.Write(c.writev)
	if err == nil {
		err = c.werr
	}
	n := c.wn
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		n, err = 0, nil
	}
	if err != nil {
		// worded as the writer's net.Buffers.WriteTo words it
		err = &net.OpError{Op: "writev", Net: "tcp", Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: os.NewSyscallError("writev", err)}
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return true
	}
	if n == frameHeaderLen+w.n {
		c.complete(w)
		return true
	}
	c.rest, c.restWork = skip(net.Buffers{bufs[0], bufs[1]}, n), w
	c.queued.Add(1)
	c.queue <- work{resume: true} // w holds no slot of the queue, and one is spare: there is room
	return true
}

// writevIov is the function tryWrite hands the socket's RawConn: one
// writev of c.iov, whatever the socket takes, never a wait for it to
// drain. It is made once (newConn), so that a write allocates nothing.
func (c *Conn) writevIov(fd uintptr) bool {
	n, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&c.iov[0])), uintptr(len(c.iov)))
	if e != 0 {
		c.werr = e
	} else {
		c.wn = int(n)
	}
	return true
}

// skip returns b without its first n bytes.
func skip(b net.Buffers, n int) net.Buffers {
	for len(b) > 0 && n >= len(b[0]) {
		n -= len(b[0])
		b = b[1:]
	}
	if len(b) > 0 {
		b[0] = b[0][n:]
	}
	return b
}

// finishRest writes what tryWrite left, blocking, and reports that message
// sent; wmu is held. It returns false if the connection failed.
func (c *Conn) finishRest() bool {
	if c.rest == nil {
		return true
	}
	rest := c.rest
	c.rest = nil
	if _, err := rest.WriteTo(c.nc); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	c.complete(c.restWork)
	return true
}

// writeLoop writes queued messages in order until the connection fails, or
// until Close, after writing what was queued before it.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	defer close(c.written)
	for {
		select {
		case w := <-c.queue:
			if !c.write(w) {
				return
			}
		case <-c.pulses:
			if !c.pulse() {
				return
			}
		case <-c.closing:
			for {
				select {
				case w := <-c.queue:
					if !c.write(w) {
						return
					}
				default:
					return
				}
			}
		case <-c.done:
			return
		}
	}
}

// write writes first and whatever else is queued, up to maxBatchBytes, in
// one system call, then reports the sends; what tryWrite left goes first.
// It returns false if the connection failed.
func (c *Conn) write(first work) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	taken := 1
	defer func() { c.queued.Add(int64(-taken)) }()
	if !c.finishRest() {
		return false
	}
	batch := c.batch[:0]
	bytes := 0
	if !first.resume {
		batch, bytes = append(batch, first), first.n
	}
fill:
	for bytes < maxBatchBytes && len(batch) < cap(batch) {
		select {
		case w := <-c.queue:
			taken++
			if !w.resume {
				batch = append(batch, w)
				bytes += w.n
			}
		default:
			break fill
		}
	}
	if len(batch) == 0 {
		return true
	}
	vec := c.vec[:0]
	for k, w := range batch {
		h := c.hdrs[k*frameHeaderLen : (k+1)*frameHeaderLen]
		frameHeader(h, w.n, w.ctrl)
		vec = append(vec, h, c.payload(w))
	}
	c.nb = vec
	if _, err := c.nb.WriteTo(c.nc); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	for _, w := range batch {
		c.complete(w)
	}
	return true
}

// complete reports a written message: a control buffer is free again, a
// send or forward is a completion for Poll. Neither channel is ever full.
func (c *Conn) complete(w work) {
	switch {
	case w.ctrl:
		c.ctrlFree <- w.buf
	case w.fwd:
		c.comps <- conn.Completion{Op: conn.OpForward, Buf: w.buf, Len: w.n}
	default:
		c.comps <- conn.Completion{Op: conn.OpSend, Buf: w.buf, Len: w.n}
	}
}

// pulse sends a pulse (see pulseFrame), after what tryWrite left. It
// returns false if the connection failed.
func (c *Conn) pulse() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.finishRest() {
		return false
	}
	var h [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(h[:], pulseFrame)
	if _, err := c.nc.Write(h[:]); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	return true
}

// payload returns the bytes of w.
func (c *Conn) payload(w work) []byte {
	switch {
	case w.ctrl:
		return c.ctrlBufs[w.buf][:w.n]
	case w.fwd:
		return (*c.adopted.Load()).RecvBuf(w.buf)[:w.n]
	}
	return c.sendBufs[w.buf][:w.n]
}
