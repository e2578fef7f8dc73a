package tcp

import (
	"errors"
	"net"
	"os"
	"syscall"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

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

// direct is the state of a write by the goroutine that posts a message
// (see tryWrite), made without blocking and without allocating.
type direct struct {
	raw      syscall.RawConn // for writeFrame's non-blocking writev; nil if the socket has none
	hdr      [frameHeaderLen]byte
	iov      [2]unix.Iovec      // the frame header and payload
	writev   func(uintptr) bool // d.writevIov, made once
	n        int                // bytes writevIov wrote
	err      error              // writevIov's error
	rest     net.Buffers        // what tryWrite could not write, for the writer to finish
	restWork work               // the message rest belongs to
}

// tryWrite writes w's frame at once, without blocking, when the writer is
// idle and nothing is queued or left unfinished; it reports whether it
// took w. Bytes the socket does not take are left in rest, and a resume
// marker is queued so that the writer finishes them.
func (c *Conn) tryWrite(w work) bool {
	d := &c.direct
	if d.raw == nil || c.queued.Load() != 0 || !c.wmu.TryLock() {
		return false
	}
	defer c.wmu.Unlock()
	if c.queued.Load() != 0 || d.rest != nil {
		return false
	}
	p := c.payload(w)
	n, err := d.writeFrame(w, p)
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
	d.rest, d.restWork = skip(net.Buffers{d.hdr[:], p}, n), w
	c.queued.Add(1)
	c.queue <- work{resume: true} // w holds no slot of the queue, and one is spare: there is room
	return true
}

// writeFrame writes the frame of w, whose payload is p, with one
// non-blocking writev, and returns how many bytes the socket took: 0 when
// it would block.
func (d *direct) writeFrame(w work, p []byte) (int, error) {
	frameHeader(d.hdr[:], w.n, w.ctrl)
	for k, b := range [2][]byte{d.hdr[:], p} {
		d.iov[k] = unix.Iovec{}
		d.iov[k].SetLen(len(b))
		if len(b) > 0 {
			d.iov[k].Base = &b[0]
		}
	}
	d.n, d.err = 0, nil
	err := d.raw.Write(d.writev)
	if err == nil {
		err = d.err
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		return 0, nil
	}
	return d.n, err
}

// writevIov is the function tryWrite hands the socket's RawConn: one
// writev of c.direct.iov, whatever the socket takes, never a wait for it to
// drain, made as a raw system call, which keeps its P (see rawReader). It
// is made once (newConn), so that a write allocates nothing.
func (d *direct) writevIov(fd uintptr) bool {
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&d.iov[0])), uintptr(len(d.iov)))
	if e != 0 {
		d.err = e
	} else {
		d.n = int(n)
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
	if c.direct.rest == nil {
		return true
	}
	rest := c.direct.rest
	c.direct.rest = nil
	if _, err := rest.WriteTo(c.nc); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	c.complete(c.direct.restWork)
	return true
}
